"""Indexing against hostile servers and damaged files: a remote index cache damaged on disk,
a server with neither ETag nor Last-Modified under a member cache, whole files that are no
corpus under ``on_error="skip"`` (locally and remotely), and ``owt index`` against a server
that drips its body."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import remote_servers
from openwebtext import Corpus
from openwebtext.errors import CorpusError
from openwebtext.index.remote import cache_path
from openwebtext.source.membercache import FOLDER
from remote_servers import RangeServer, local_stream
from support import texts

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote

http = remote_servers.http  # fixtures
isolated_storage = remote_servers.isolated_storage


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw["units"][0].__setitem__(1, "12"),  # an offset as text
        lambda raw: raw["units"][0].__setitem__(2, -5),  # a negative size
        lambda raw: raw["units"][0].pop(),  # a row too short
        lambda raw: raw.pop("subset"),
        lambda raw: raw.__setitem__("units", {"a": 1}),
        lambda raw: raw["units"].append(None),
    ],
)
def test_a_damaged_remote_index_cache_is_indexed_again(
    small_corpus: Path, http: RangeServer, damage: object
) -> None:
    url = http.url + "/urlsf_subset00.tar"
    first = Corpus.open(url)
    path = cache_path(url)
    raw = json.loads(path.read_text())
    damage(raw)  # type: ignore[operator]
    path.write_text(json.dumps(raw))
    http.reset_counts()
    again = Corpus.open(url)
    assert again.units == first.units
    assert http.gets > 0  # walked again, not taken from the damaged file
    assert texts(again, seed=1, workers=0) == local_stream(
        small_corpus / "urlsf_subset00.tar", seed=1
    )


def test_without_etag_or_last_modified_the_member_cache_says_it_is_off(
    http: RangeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    http.misbehave.validators = False
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        corpus = Corpus.open(http.url + "/", cache_dir=tmp_path / "members")
        Corpus.open(http.url + "/", cache_dir=tmp_path / "members")
        texts(corpus, seed=0, workers=0)
    said = [r.getMessage() for r in caplog.records if "member cache is off" in r.getMessage()]
    assert len(said) == len(corpus.files()) == 2  # once per file, however many opens
    assert all("neither ETag nor Last-Modified" in text for text in said)
    assert not list((tmp_path / "members" / FOLDER).glob("*/*"))


def _bad_files(folder: Path, kind: str) -> Path:
    bad = {"random": os.urandom(5000), "zeros": bytes(10240), "empty": b""}[kind]
    (folder / "urlsf_subset09.tar").write_bytes(bad)
    return folder / "urlsf_subset09.tar"


@pytest.mark.parametrize("kind", ["random", "zeros", "empty"])
def test_a_whole_file_that_is_no_tar_is_skipped_and_named(
    small_corpus: Path, tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "served"
    shutil.copytree(small_corpus, root)
    _bad_files(root, kind)
    good = local_stream(small_corpus, seed=2)
    local = Corpus.open(str(root), on_error="skip")
    with RangeServer(root) as server:
        remote = Corpus.open(server.url + "/", on_error="skip")
        for corpus, name in ((local, str(root)), (remote, server.url)):
            assert [u[1:] for u in corpus.units] == [
                u[1:] for u in Corpus.open(str(small_corpus)).units
            ]
            assert len(corpus.skipped_files) == 1
            skipped = corpus.skipped_files[0]
            assert skipped.path == f"{name}/urlsf_subset09.tar"
            assert texts(corpus, seed=2, workers=0, on_error="skip") == good
        assert (
            str(remote.skipped_files[0]).split(": ", 1)[1]
            == str(local.skipped_files[0]).split(": ", 1)[1]
        )  # the same words as the local path
        with pytest.raises(CorpusError, match=r"urlsf_subset09\.tar"):
            Corpus.open(server.url + "/")  # under raise, the first bad file is the error


@pytest.mark.slow  # deadlines waited out in real time: its own CI step
def test_owt_index_against_a_dripping_server_ends_with_a_clear_error(
    small_corpus: Path, http: RangeServer
) -> None:
    http.misbehave.drip = 2.0  # 1 byte every 2 s: the socket's read timeout never fires
    url = http.url + "/urlsf_subset00.tar"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "openwebtext.cli", "index", url, "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=90,  # the deadline's floor is 30 s
    )
    assert time.monotonic() - began < 75
    assert run.returncode == 1, run.stderr
    assert url in run.stderr and "no complete answer within" in run.stderr
    assert "Task was destroyed" not in run.stderr and "Traceback" not in run.stderr


def _drop_middle(raw: dict[str, Any]) -> None:
    raw["units"].pop(1)


def _drop_last(raw: dict[str, Any]) -> None:
    raw["units"].pop()


def _past_the_end(raw: dict[str, Any]) -> None:
    raw["units"][0][1] = raw["size"] + 512


def _overlap(raw: dict[str, Any]) -> None:
    raw["units"][1][1] = raw["units"][0][1] + 512


def _no_room_for_a_header(raw: dict[str, Any]) -> None:  # right after the one before
    first = raw["units"][0]
    raw["units"][1][1] = first[1] + -(-first[2] // 512) * 512


def _renumbered(raw: dict[str, Any]) -> None:  # the middle one left out, the rest renumbered
    raw["units"].pop(1)
    for k, row in enumerate(raw["units"]):
        row[4] = k


@pytest.mark.parametrize(
    ("wrong", "digest_again"),
    [
        # Told by the entry's shape, even with its digest made again to fit:
        (_drop_middle, True),
        (_past_the_end, True),
        (_overlap, True),
        (_no_room_for_a_header, True),
        # Told by its digest only (the shape of a real index):
        (_drop_last, False),
        (_renumbered, False),
    ],
)
def test_a_remote_index_cache_entry_that_is_json_but_wrong_is_indexed_again(
    small_corpus: Path,
    http: RangeServer,
    caplog: pytest.LogCaptureFixture,
    wrong: Any,
    digest_again: bool,
) -> None:
    url = http.url + "/urlsf_subset00.tar"
    first = Corpus.open(url)
    assert len(first.units) == 3
    path = cache_path(url)
    raw = json.loads(path.read_text())
    wrong(raw)
    if digest_again:
        rows = json.dumps(raw["units"], separators=(",", ":"))
        raw["digest"] = hashlib.sha256(rows.encode()).hexdigest()
    path.write_text(json.dumps(raw))
    http.reset_counts()
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        again = Corpus.open(url)
    assert again.units == first.units
    assert http.gets > 0  # walked again
    said = [r.getMessage() for r in caplog.records if "cached index is wrong" in r.getMessage()]
    assert len(said) == 1 and "indexed again" in said[0]
    assert json.loads(path.read_text())["units"] != raw["units"]  # and written again whole


@pytest.mark.parametrize(
    ("damage", "field"),
    [
        (lambda raw: raw["units"][0].__setitem__(1, "512"), "units[0][1]"),
        (lambda raw: raw["units"][0].__setitem__(2, True), "units[0][2]"),
        (lambda raw: raw["units"][0].pop(), "units[0]"),
        (lambda raw: raw.update(units=[]), "units"),
        (lambda raw: raw.pop("subset"), "subset"),
        (lambda raw: raw.update(size=-1), "size"),
        (lambda raw: raw.update(format=5), "format"),  # (no version's: said, not passed over)
    ],
)
def test_a_remote_index_cache_entry_of_wrong_types_names_its_field_and_is_indexed_again(
    small_corpus: Path,
    http: RangeServer,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[dict[str, Any]], object],
    field: str,
) -> None:
    """The cache entry is a codec record (``IndexCache``): a field of the wrong type or
    shape is said by its path, and the file walked again; another version's entry only is
    not this one's (walked again, nothing said)."""
    url = http.url + "/urlsf_subset00.tar"
    first = Corpus.open(url)
    path = cache_path(url)
    raw = json.loads(path.read_text())
    damage(raw)
    path.write_text(json.dumps(raw))
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        assert Corpus.open(url).units == first.units
    said = [r.getMessage() for r in caplog.records if "cached index is wrong" in r.getMessage()]
    assert len(said) == 1 and f"bad remote index cache: {field}:" in said[0], said
    caplog.clear()
    path.write_text(json.dumps({**raw, "format": "openwebtext-remote-index/1"}))
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        assert Corpus.open(url).units == first.units
    assert not caplog.records


def test_a_cached_index_s_subset_edited_is_indexed_again(
    http: RangeServer, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    """The entry's digest covered its rows, not its ``subset``, which every document carries
    (``Document.subset``, ``owt stream --jsonl``, Ray's column): one bit there relabelled the
    file's documents, taken without a word."""
    url = http.url + "/urlsf_subset01.tar"
    first = Corpus.open(url)
    path = cache_path(url)
    raw = json.loads(path.read_text())
    assert raw["subset"] == "urlsf_subset01"
    path.write_text(json.dumps({**raw, "subset": "urlsf_subset00"}))
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        again = Corpus.open(url)
    assert {u.subset for u in again.units} == {"urlsf_subset01"} and again.units == first.units
    assert "its members are not those it was written with" in caplog.text
