"""A file of several compressed streams (bgzip, pbzip2, ``cat a.xz b.xz``) cut just after a
whole stream, inside the next one's first bytes, is a file cut short: what came before is
kept (red team, session 40). The bytes left were taken for trailing garbage: the whole member
was corrupt, every line of a JSON lines file lost under ``skip``. zstd's frames were right."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from collections.abc import Callable
from pathlib import Path

import pytest

from openwebtext import Loader
from openwebtext.formats import BZIP2, GZIP, XZ, Truncated, decompress, detect
from support import inner_tar

_COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    GZIP: gzip.compress, XZ: lzma.compress, BZIP2: bz2.compress,
}  # fmt: skip
_SUFFIX = {GZIP: "gz", XZ: "xz", BZIP2: "bz2"}


def _lines(first: int, stop: int) -> bytes:
    return "".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(first, stop)).encode()


def _cuts(kind: str) -> list[int]:
    """Cuts inside the next stream's first bytes, up to where ``detect`` knows it."""
    second = _COMPRESS[kind](b"more")
    return [n for n in range(1, 12) if detect(second[:n]) != kind] or [1]


@pytest.mark.parametrize("kind", [GZIP, XZ, BZIP2])
def test_a_cut_inside_the_next_stream_s_header_is_a_cut(kind: str) -> None:
    first, second = _COMPRESS[kind](b"first stream"), _COMPRESS[kind](b"second")
    for n in _cuts(kind):
        with pytest.raises(Truncated) as cut:
            decompress(first + second[:n], kind, 1 << 20)
        assert cut.value.data == b"first stream"
    with pytest.raises(ValueError, match="trailing garbage"):  # (other bytes: garbage still)
        decompress(first + b"#" + second[1:4], kind, 1 << 20)


def test_json_lines_cut_there_keep_their_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(_lines(0, 5)) + gzip.compress(_lines(5, 10))[:1])
    with Loader(str(path), shuffle=False, workers=0, on_error="skip").iter() as documents:
        texts = [d.text for d in documents]
        assert (documents.stats.partial_members, documents.stats.skipped_members) == (1, 0)
    assert texts == [f"doc {i}" for i in range(5)]


@pytest.mark.parametrize("kind", [XZ, BZIP2])
def test_a_member_cut_there_keeps_its_documents(tmp_path: Path, kind: str) -> None:
    docs = [(f"{k:04d}.txt", f"document {k}".encode()) for k in range(3)]
    inner = inner_tar(dict(docs))
    member = _COMPRESS[kind](inner) + _COMPRESS[kind](b"x" * 100)[: _cuts(kind)[-1]]
    (tmp_path / "urlsf_subset00.tar").write_bytes(
        inner_tar({"openwebtext/urlsf_subset00-1_data.xz": member}))  # fmt: skip
    loader = Loader(str(tmp_path), shuffle=False, workers=0, on_error="skip")
    with loader.iter() as documents:
        read = [d.text for d in documents]
        assert (documents.stats.partial_members, documents.stats.skipped_members) == (1, 0)
    assert read == [text.decode() for _, text in docs]
