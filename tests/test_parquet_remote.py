"""Parquet over HTTP (``remote_servers.RangeServer`` on 127.0.0.1), what is parquet's own: the
footer cached with the file's identity, a damaged row group, a missing column. Stream, resume,
even shares and tokenize over HTTP: test_corpus_contract.py."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember
from openwebtext.index import parquet
from remote_servers import RangeServer
from support import texts
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


@pytest.mark.parametrize("at", [0, 5, -9])
def test_a_damaged_footer_cache_entry_is_read_again_never_blamed_on_the_file(
    http: RangeServer, at: int, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    """One bit of a footer cache entry flipped on local disk: the entry was trusted (its
    stamp checked, not its bytes), so a sound remote file's row groups were "corrupt" on
    every run (under skip: every document lost), or pyarrow aborted the process. Its bytes
    are checked against their digest now: a damaged entry is absent, the footer read again."""
    first = texts(Corpus.open(http.url + "/"), seed=1, workers=0)
    footers = Path(os.environ["OWT_CACHE_DIR"]) / "parquet-footers"
    for entry in footers.iterdir():
        stamp, body = entry.read_text().split("\n", 1)
        footer = bytearray.fromhex(body.strip())
        footer[at] ^= 1
        entry.write_text(stamp + "\n" + footer.hex())
    parquet._FOOTERS.clear()  # a new process: only the caches on disk
    with caplog.at_level("WARNING", logger="openwebtext"):
        assert texts(Corpus.open(http.url + "/"), seed=1, workers=0) == first
    assert "parquet footer cache entry" in caplog.text and "is damaged" in caplog.text


def test_a_footer_cache_entry_of_before_its_digest_is_absent_without_a_word(
    http: RangeServer, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    """An entry written before entries held their footer's digest is no damage: read again,
    nothing said (a warning per remote file, on the first run after, would be a false alarm)."""
    import json

    first = texts(Corpus.open(http.url + "/"), seed=1, workers=0)
    footers = Path(os.environ["OWT_CACHE_DIR"]) / "parquet-footers"
    for entry in footers.iterdir():
        stamp, body = entry.read_text().split("\n", 1)
        said = json.loads(stamp)
        del said["sha256"]
        entry.write_text(json.dumps(said) + "\n" + body)
    parquet._FOOTERS.clear()
    with caplog.at_level("WARNING", logger="openwebtext"):
        assert texts(Corpus.open(http.url + "/"), seed=1, workers=0) == first
    assert "footer" not in caplog.text
