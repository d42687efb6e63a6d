"""Parquet and JSON lines on surprising data: each line or row an outcome under the same
policies as a tar's documents, every unit bounded by ``max_member_bytes``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorruptDocument, MemberTooLarge
from tables_support import sample_texts, write_parquet

TEXTS = sample_texts(30, seed=9)


def _stream(path: Path, **options: object) -> tuple[list[str], object]:
    loader = Loader(path, workers=0, shuffle=False, on_error="skip", **options)  # type: ignore[arg-type]
    with loader.iter() as it:
        return [d.text for d in it], it.stats


# -- parquet ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [0, 1, 2])
def test_a_row_group_of_no_rows_is_a_unit_of_no_document(tmp_path: Path, where: int) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    schema = pa.schema([("text", pa.string())])
    parts = [TEXTS[:10], TEXTS[10:]]
    parts.insert(where, [])
    path = tmp_path / "z.parquet"
    with pq.ParquetWriter(path, schema) as writer:
        for part in parts:
            writer.write_table(pa.table({"text": part}, schema=schema))
    corpus = Corpus.open(path)
    assert len(corpus.units) == 3
    assert [d.text for d in Loader(corpus, workers=0, shuffle=False)] == TEXTS
    assert sorted(d.text for d in Loader(corpus, workers=2, seed=3)) == sorted(TEXTS)


@pytest.mark.parametrize("encoding", ["dictionary", "delta"])
def test_a_parquet_bomb_is_bounded_by_max_member_bytes(tmp_path: Path, encoding: str) -> None:
    """A value of 1 MiB on 300 rows: a few KB of file, 300 MiB of text."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "bomb.parquet"
    table = pa.table({"text": ["x" * (1 << 20)] * 300})
    if encoding == "dictionary":
        pq.write_table(table, path, compression="zstd")
    else:
        pq.write_table(table, path, compression="zstd", use_dictionary=False,
                       column_encoding={"text": "DELTA_BYTE_ARRAY"})  # fmt: skip
    assert path.stat().st_size < 1 << 20
    with pytest.raises(MemberTooLarge, match="max_member_bytes") as raised:
        list(Loader(path, workers=0, max_member_bytes=32 << 20))
    assert raised.value.path == str(path)
    texts, stats = _stream(path, max_member_bytes=32 << 20)
    assert texts == [] and stats.skipped_members == 1  # type: ignore[attr-defined]
    assert len(list(Loader(path, workers=0, max_member_bytes=400 << 20))) == 300


def test_a_large_plain_row_group_is_bounded_too(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "p.parquet", TEXTS, row_group=30)
    with pytest.raises(MemberTooLarge):
        list(Loader(path, workers=0, max_member_bytes=1000))


# -- JSON lines ---------------------------------------------------------------------------

GOOD = [json.dumps({"text": t}).encode() for t in TEXTS[:3]]


@pytest.mark.parametrize(
    "bad",
    [
        b"[" * 100_000,  # nested past the parser's recursion
        b'{"a": ' * 50_000 + b"1" + b"}" * 50_000,
        b"[1, 2]",
        b'"a string"',
        b"42",
        b"null",
        b"   ",
        b"\t\x0c",
        b'{"text": 5}',
        b'{"other": "x"}',
    ],
    ids=lambda b: repr(b[:12]),
)
def test_a_bad_line_is_one_document_under_the_policy(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\n".join([GOOD[0], bad, GOOD[1], GOOD[2]]) + b"\n")
    with pytest.raises(CorruptDocument, match="line 2") as raised:
        list(Loader(path, workers=0))
    assert raised.value.path == str(path)
    texts, stats = _stream(path)
    assert texts == TEXTS[:3]
    assert stats.skipped_documents == 1 and stats.skipped_members == 0  # type: ignore[attr-defined]


def test_empty_lines_are_no_documents(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"\n" + b"\r\n".join(GOOD) + b"\r\n\n\n")
    texts, stats = _stream(path)
    assert texts == TEXTS[:3] and stats.skipped_documents == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xed\xa0\x80"])
def test_decode_errors_replace_keeps_a_line_that_is_not_utf8(tmp_path: Path, bad: bytes) -> None:
    path = tmp_path / "u.jsonl"
    path.write_bytes(b"\n".join([GOOD[0], b'{"text": "a' + bad + b'b"}', GOOD[1]]) + b"\n")
    texts, stats = _stream(path)  # strict: left out, counted
    assert texts == [TEXTS[0], TEXTS[1]] and stats.skipped_documents == 1  # type: ignore[attr-defined]
    texts, stats = _stream(path, decode_errors="replace")
    assert texts[0] == TEXTS[0] and texts[2] == TEXTS[1]
    assert texts[1].startswith("a") and texts[1].endswith("b") and "\ufffd" in texts[1]
    assert stats.replaced_documents == 1 and stats.skipped_documents == 0  # type: ignore[attr-defined]


def test_a_plain_jsonl_chunk_past_the_limit_is_a_member_error(tmp_path: Path) -> None:
    """One line longer than max_member_bytes makes its chunk that long: bounded too."""
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"\n".join([GOOD[0], json.dumps({"text": "x" * 50_000}).encode()]) + b"\n")
    with pytest.raises(MemberTooLarge, match="JSON lines pass max_member_bytes"):
        list(Loader(path, workers=0, max_member_bytes=20_000, max_document_bytes=20_000))
    texts, stats = _stream(path, max_member_bytes=20_000, max_document_bytes=20_000)
    assert texts == [] and stats.skipped_members == 1  # type: ignore[attr-defined]


def test_a_token_unit_past_the_limit_is_a_member_error(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "train.bin"
    path.write_bytes(np.array([1] * 30_000 + [256], "<u2").tobytes())  # one document, 60 KB
    corpus = Corpus.open_tokens(path, eot=256)
    loader = Loader(corpus, tokenizer="bytes", workers=0, max_member_bytes=20_000,
                    max_document_bytes=20_000)  # fmt: skip
    with pytest.raises(MemberTooLarge, match="token ids pass max_member_bytes"):
        list(loader)
