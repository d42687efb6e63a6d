"""JSON lines over HTTP (``remote_servers.RangeServer`` on 127.0.0.1): a bad line. A plain file
cut at lines by ranged reads, a compressed one read whole (stream, resume, even shares,
tokenize): test_corpus_contract.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import remote_servers
from openwebtext import Corpus, Loader
from openwebtext.errors import CorruptDocument
from remote_servers import RangeServer
from support import texts
from tables_support import sample_texts, write_jsonl

pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")

pytestmark = pytest.mark.remote
isolated_storage = remote_servers.isolated_storage

TEXTS = sample_texts(100, seed=6)


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
