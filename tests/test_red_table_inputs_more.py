"""More inputs a red team found misread: a parquet footer that understates its text chunk or
says its values are plain, a dictionary-typed text column (a pandas ``category``), a JSON
line with a very long integer in another field, and a token file's index changed after the
file was opened in the same process. Each is read as its bytes say, or refused as an error
naming the file and member, never handed out past ``max_member_bytes`` or read stale."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorruptDocument, MemberTooLarge
from openwebtext.tokenfiles import TokenFileError, megatron_index, opened

pytest.importorskip("pyarrow")

MiB = 1 << 20


def _stream(path: Path, **options: object) -> tuple[list[str], object]:
    loader = Loader(path, workers=0, shuffle=False, on_error="skip", **options)  # type: ignore[arg-type]
    with loader.iter() as it:
        return [d.text for d in it], it.stats


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _footer_start(data: bytes | bytearray) -> int:
    return len(data) - 8 - int.from_bytes(data[-8:-4], "little")


def _refused(path: Path, limit: int) -> None:
    """``path``'s one row group is ``MemberTooLarge`` under ``limit``, by any pool, and a
    counted skip under ``on_error="skip"``."""
    for workers in (0, 2):
        with pytest.raises(MemberTooLarge, match=r"row group 0's 'text'.*max_member_bytes") as e:
            list(Loader(path, workers=workers, max_member_bytes=limit))
        assert e.value.path == str(path) and e.value.member == f"{path.name}#rg0"
    texts, stats = _stream(path, max_member_bytes=limit)
    assert texts == [] and stats.skipped_members == 1  # type: ignore[attr-defined]


# -- a footer that lies about its text chunk ---------------------------------------------------


def test_a_footer_that_understates_a_plain_chunk_does_not_pass_max_member_bytes(
    tmp_path: Path,
) -> None:
    """24 values of 1 MiB, zstd: a 1.5 KB file whose footer says its chunk is 100 bytes
    uncompressed. The footer's figure was the only bound: 24 MiB were handed out under
    ``max_member_bytes`` of 1 MiB. The pages' headers say what they decompress to."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"text": ["x" * MiB] * 24}), path, compression="zstd",
                   use_dictionary=False, write_statistics=False)  # fmt: skip
    real = pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size
    old = _varint(real << 1)  # (zigzag)
    new = bytearray(_varint(100 << 1))
    while len(new) < len(old):  # the same length: a varint padded with zero groups
        new[-1] |= 0x80
        new.append(0)
    data = bytearray(path.read_bytes())
    at = data.index(old, _footer_start(data))  # ColumnMetaData.total_uncompressed_size
    data[at : at + len(old)] = new
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).total_uncompressed_size == 100
    _refused(path, MiB)
    assert len(list(Loader(path, workers=0, max_member_bytes=32 * MiB))) == 24


def test_a_footer_that_says_a_delta_chunk_is_plain_does_not_pass_max_member_bytes(
    tmp_path: Path,
) -> None:
    """DELTA_BYTE_ARRAY repeats a prefix: 40 rows of 1 MiB in 1 MiB of pages, honestly
    sized. The footer's encodings said PLAIN instead, and the chunk was decoded whole as
    plain values, 40 MiB under ``max_member_bytes`` of 8 MiB: how a page's values are
    encoded is its header's."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "delta.parquet"
    pq.write_table(pa.table({"text": ["y" * MiB] * 40}), path, compression="zstd",
                   use_dictionary=False, column_encoding={"text": "DELTA_BYTE_ARRAY"})  # fmt: skip
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert "DELTA_BYTE_ARRAY" in chunk.encodings and chunk.total_uncompressed_size < 2 * MiB
    data = bytearray(path.read_bytes())
    # ColumnMetaData: type BYTE_ARRAY (field 1), then encodings (field 2), a list of i32
    head = data.index(b"\x15\x0c\x19", _footer_start(data)) + 3
    count = data[head] >> 4
    codes = data[head + 1 : head + 1 + count]
    assert bytes([7 << 1]) in codes  # DELTA_BYTE_ARRAY (zigzag)
    data[head + 1 + codes.index(7 << 1)] = 0  # PLAIN
    path.write_bytes(bytes(data))
    assert "DELTA_BYTE_ARRAY" not in pq.ParquetFile(path).metadata.row_group(0).column(0).encodings
    _refused(path, 8 * MiB)
    assert len(list(Loader(path, workers=0, max_member_bytes=64 * MiB))) == 40


# -- a dictionary-typed text column ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["string", "large_string", "binary"])
def test_a_dictionary_text_column_reads_as_its_values(tmp_path: Path, kind: str) -> None:
    """What pandas writes of a ``category`` column: refused as "not text" at open."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    values = [f"news item {k % 7}" if k % 11 else None for k in range(60)]
    column = pa.array(values, getattr(pa, kind)())
    pq.write_table(pa.table({"text": column.dictionary_encode()}), tmp_path / "dict.parquet",
                   row_group_size=25)  # fmt: skip
    pq.write_table(pa.table({"text": column}), tmp_path / "plain.parquet", row_group_size=25)
    schema = pq.ParquetFile(tmp_path / "dict.parquet").schema_arrow
    assert pa.types.is_dictionary(schema.field("text").type)
    plain, plain_stats = _stream(tmp_path / "plain.parquet")
    texts, stats = _stream(tmp_path / "dict.parquet")
    assert texts == plain == [v for v in values if v is not None]
    assert stats.skipped_documents == plain_stats.skipped_documents == 6  # type: ignore[attr-defined]
    corpus = Corpus.open(tmp_path / "dict.parquet")
    assert len(corpus.units) == 3
    got = sorted(d.text for d in Loader(corpus, workers=2, on_error="skip"))
    assert got == sorted(plain)


def test_a_dictionary_text_column_is_bounded_as_its_values(tmp_path: Path) -> None:
    """A value of 1 MiB on 300 rows, dictionary-typed: measured decoded, not as a dictionary
    of one value and 300 indices."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "bomb.parquet"
    column = pa.array(["z" * MiB] * 300).dictionary_encode()
    pq.write_table(pa.table({"text": column}), path, compression="zstd")
    assert path.stat().st_size < MiB
    _refused(path, 32 * MiB)
    assert len(list(Loader(path, workers=0, max_member_bytes=400 * MiB))) == 300


# -- a JSON line with a very long integer ------------------------------------------------------


@pytest.fixture
def int_digits() -> Iterator[None]:
    """Python's default limit of an int's digits from a string (4300), whatever it was."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(before)


@pytest.mark.usefixtures("int_digits")
def test_a_long_integer_in_another_field_does_not_refuse_the_line(tmp_path: Path) -> None:
    """5000 digits in ``id`` (past ``int()``'s 4300): the line was refused as "not a JSON
    object with a string 'text'". A ``text`` of those digits is still no text."""
    path = tmp_path / "long.jsonl"
    digits = b"7" * 5000
    path.write_bytes(
        b'{"text": "first", "id": ' + digits + b"}\n"
        b'{"meta": {"n": [1, -' + digits + b', 2.5]}, "text": "second"}\n'
        b'{"text": ' + digits + b"}\n"
        b'{"text": "third", "id": 12}\n'
    )  # fmt: skip
    texts, stats = _stream(path)
    assert texts == ["first", "second", "third"]
    assert stats.skipped_documents == 1  # type: ignore[attr-defined]
    with pytest.raises(CorruptDocument, match=r"line 3: .*its 'text' is not a string") as raised:
        list(Loader(path, workers=0, shuffle=False))
    assert raised.value.path == str(path)


@pytest.mark.parametrize(
    ("line", "why"),
    [(b'{"body": "x"}', "no field 'text'"), (b'{"text": null}', "its 'text' is not a string "
     "(NoneType)"), (b'{"text": ["x"]}', "its 'text' is not a string (list)")],
)  # fmt: skip
def test_a_line_without_its_text_says_why(tmp_path: Path, line: bytes, why: str) -> None:
    """A line with no text field said a bare ``'text'`` (the ``KeyError``'s text) as its
    reason (red team, session 28)."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"text": "a"}\n' + line + b"\n")
    with pytest.raises(CorruptDocument) as raised:
        list(Loader(path, workers=0, shuffle=False))
    assert str(raised.value).endswith(f"line 2: not a JSON object with a string 'text': {why}"
                                      " (document m.jsonl@14)"), str(raised.value)  # fmt: skip


# -- a token file's index changed after it was opened -------------------------------------------


def _token_docs(path: Path) -> list[list[int]]:
    corpus = Corpus.open_tokens(path)
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False)
    return [d.tokens.tolist() for d in loader]  # type: ignore[union-attr]


def test_a_megatron_index_changed_after_the_open_is_read_again(tmp_path: Path) -> None:
    """``opened`` cached by the ``.bin``'s path, size and mtime: a new ``.idx`` was never
    read in the process, nor a damaged one said."""
    bin_path, idx = tmp_path / "train.bin", tmp_path / "train.idx"
    np.arange(1, 13, dtype="<u2").tofile(bin_path)
    idx.write_bytes(megatron_index(np.array([3, 6, 9, 12]), np.dtype("<u2")))
    assert _token_docs(bin_path) == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]
    idx.write_bytes(megatron_index(np.array([1, 2, 12]), np.dtype("<u2")))
    assert _token_docs(bin_path) == [[1], [2], list(range(3, 13))]
    idx.write_bytes(b"garbage, not an index")
    with pytest.raises(TokenFileError) as raised:
        _token_docs(bin_path)
    assert raised.value.path == str(idx)


def test_a_datatrove_index_changed_after_the_open_is_read_again(tmp_path: Path) -> None:
    path, index = tmp_path / "train.ds", tmp_path / "train.ds.index"
    np.arange(1, 11, dtype="<u2").tofile(path)
    index.write_bytes(np.array([5, 10], "<u8").tobytes())
    assert _token_docs(path) == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    index.write_bytes(np.array([2, 4, 10], "<u8").tobytes())
    assert _token_docs(path) == [[1, 2], [3, 4], [5, 6, 7, 8, 9, 10]]


def test_a_meta_json_put_beside_after_the_open_is_read_again(tmp_path: Path) -> None:
    """``opened`` itself (what the workers call): the ``meta.json`` it reads beside the file
    is part of what it was opened as."""
    path = tmp_path / "train.bin"
    np.array([1, 2, 256, 3, 256], "<u2").tofile(path)
    first = opened(path, eot=256, dtype="uint16")
    assert first.tokenizer is None and first.ends.tolist() == [3, 5]
    (tmp_path / "meta.json").write_text("{not JSON")
    with pytest.raises(TokenFileError, match="not JSON") as raised:
        opened(path, eot=256, dtype="uint16")
    assert raised.value.path == str(tmp_path / "meta.json")
