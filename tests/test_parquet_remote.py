"""Parquet over HTTP (``remote_servers.RangeServer`` on 127.0.0.1): units as locally, row groups
read by range, the footer cached with the file's identity; stream, resume, even shares,
tokenize, a damaged row group, a missing column."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember
from openwebtext.index import parquet
from remote_servers import RangeServer
from tables_support import sample_texts, write_parquet

pytest.importorskip("pyarrow")
pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote
isolated_storage = remote_servers.isolated_storage

TEXTS = sample_texts(90, seed=5)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_parquet(tmp_path / "data" / "train-00000-of-00002.parquet", TEXTS[:60], row_group=11)
    write_parquet(tmp_path / "data" / "train-00001-of-00002.parquet", TEXTS[60:], row_group=11)
    return tmp_path / "data"


@pytest.fixture
def http(root: Path) -> Iterator[RangeServer]:
    with RangeServer(root) as server:
        yield server


def texts(corpus: Corpus | Path, **options: object) -> list[str]:
    return [d.text for d in Loader(corpus, **options)]  # type: ignore[arg-type]


def test_a_remote_folder_streams_as_the_local_one(
    root: Path, http: RangeServer, caplog: pytest.LogCaptureFixture
) -> None:
    remote = Corpus.open(http.url + "/")
    assert Corpus.open(http.url + "/").units == remote.units  # from the index cache
    assert "indexed again" not in caplog.text
    local = Corpus.open(root)
    assert [u[1:] for u in remote.units] == [u[1:] for u in local.units]
    # A state names the objects it read, ETags included: a local state does not resume remotely.
    assert remote.fingerprint() != local.fingerprint()
    assert texts(remote, shuffle=False, workers=0) == TEXTS
    for workers in (0, 2):
        assert texts(remote, seed=4, workers=workers) == texts(local, seed=4, workers=0)


def test_the_footer_is_read_once_and_cached_with_the_file(
    http: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = texts(Corpus.open(http.url + "/"), seed=1, workers=0)
    footers = Path(os.environ["OWT_CACHE_DIR"]) / "parquet-footers"
    assert len(list(footers.iterdir())) == 2
    parquet._FOOTERS.clear()  # a new process: only the caches on disk
    reads: list[str] = []
    real = parquet.read_footer
    monkeypatch.setattr(parquet, "read_footer", lambda f, name: reads.append(name) or real(f, name))
    again = Corpus.open(http.url + "/")
    assert texts(again, seed=1, workers=0) == first
    assert reads == []  # neither the index (cached) nor the reader (the footer cache) read one


def test_resume_remotely(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/")
    whole = texts(corpus, seed=11, workers=2, shuffle_buffer=20)
    it = Loader(corpus, seed=11, workers=2, shuffle_buffer=20).iter()
    head = [next(it).text for _ in range(37)]
    state = it.state_dict()
    it.close()
    rest = [d.text for d in Loader(corpus, seed=11, workers=2, shuffle_buffer=20).iter(state)]
    assert head + rest == whole


def test_even_shares_remotely(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/")
    shares = [[d.name for d in Loader(corpus, rank=r, world_size=4, seed=0, workers=2)]
              for r in range(4)]  # fmt: skip
    assert [len(s) for s in shares] == [22] * 4
    assert len({n for s in shares for n in s}) == 88


def test_tokenize_remotely_writes_the_local_bins(
    root: Path, http: RangeServer, tmp_path: Path
) -> None:
    bins = []
    for source in (str(root), http.url + "/"):
        out = tmp_path / f"out{len(bins)}"
        result = subprocess.run(
            [sys.executable, "-m", "openwebtext.cli", "tokenize", source, "--out", str(out),
             "--tokenizer", "bytes", "--val-fraction", "0.2", "-j", "2", "-q"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        bins.append([(out / n).read_bytes() for n in ("train.bin", "val.bin")])
        assert json.loads((out / "meta.json").read_text())["counts"]["documents"]["train"] > 0
    assert bins[0] == bins[1]


def test_a_damaged_row_group_remotely(root: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(root, tmp_path / "damaged"))
    path = copy / "train-00000-of-00002.parquet"
    unit = Corpus.open(path).units[1]
    with open(path, "r+b") as f:
        f.seek(unit.offset)
        f.write(b"\xff" * 24)
    with RangeServer(copy) as server:
        corpus = Corpus.open(server.url + "/")
        with pytest.raises(CorruptMember, match=r"corrupt parquet row group 1") as raised:
            texts(corpus, workers=2)
        assert raised.value.path == server.url + "/train-00000-of-00002.parquet"
        with Loader(corpus, workers=2, on_error="skip", shuffle=False).iter() as it:
            got = [d.text for d in it]
            assert it.stats.skipped_members == 1
    assert got == TEXTS[:11] + TEXTS[22:]


def test_a_missing_column_remotely(http: RangeServer) -> None:
    with pytest.raises(CorpusError, match=r"no column 'body' \(its columns: id, text, url\)"):
        Corpus.open(http.url + "/train-00000-of-00002.parquet", text_column="body")
