"""JSON lines over HTTP (``remote_servers.RangeServer`` on 127.0.0.1): a plain file cut at lines
by ranged reads, a compressed one read whole; stream, resume, even shares, tokenize, a bad line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorruptDocument
from openwebtext.index import jsonl
from remote_servers import RangeServer
from tables_support import sample_texts, write_jsonl

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote
isolated_storage = remote_servers.isolated_storage

TEXTS = sample_texts(100, seed=6)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 4096)  # the plain file: several units
    write_jsonl(tmp_path / "data" / "a.jsonl", TEXTS[:70])
    write_jsonl(tmp_path / "data" / "b.jsonl.gz", TEXTS[70:])
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
    assert len(remote.units) > 3
    assert texts(remote, shuffle=False, workers=0) == TEXTS
    for workers in (0, 2):
        assert texts(remote, seed=4, workers=workers) == texts(local, seed=4, workers=0)


def test_resume_and_even_shares_remotely(http: RangeServer) -> None:
    corpus = Corpus.open(http.url + "/")
    whole = texts(corpus, seed=3, workers=2, shuffle_buffer=20)
    it = Loader(corpus, seed=3, workers=2, shuffle_buffer=20).iter()
    head = [next(it).text for _ in range(41)]
    state = it.state_dict()
    it.close()
    assert (
        head + [d.text for d in Loader(corpus, seed=3, workers=2, shuffle_buffer=20).iter(state)]
        == whole
    )
    shares = [[d.name for d in Loader(corpus, rank=r, world_size=3, workers=2)] for r in range(3)]
    assert [len(s) for s in shares] == [33] * 3 and len({n for s in shares for n in s}) == 99


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
    assert bins[0] == bins[1]


def test_a_bad_line_remotely(tmp_path: Path) -> None:
    path = tmp_path / "bad" / "x.jsonl"
    write_jsonl(path, TEXTS[:4])
    path.write_bytes(path.read_bytes().replace(b'"text"', b'"txet"', 1))
    with RangeServer(path.parent) as server:
        corpus = Corpus.open(server.url + "/x.jsonl")
        with pytest.raises(CorruptDocument, match=r"line 1: not a JSON object with a string"):
            texts(corpus, workers=2)
        with Loader(corpus, workers=2, on_error="skip", shuffle=False).iter() as it:
            assert [d.text for d in it] == TEXTS[1:4]
            assert it.stats.skipped_documents == 1
