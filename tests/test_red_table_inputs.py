"""Parquet and JSON lines inputs a red team found misread: a damaged footer entry, page
checksums, a dotted column name, two columns of one name, lone surrogates and UTF-16 lines.
Each is a clear ``CorpusError`` naming the file and member, or a counted skip, never a
``WorkerError`` "unexpected …", a bare exception or changed text."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptDocument, CorruptMember, Unsupported
from support import Owt
from tables_support import write_parquet

pytest.importorskip("pyarrow")

TEXTS = [f"document number {k} " * (k % 7 + 1) for k in range(60)]


def _stream(path: Path, **options: object) -> tuple[list[str], object]:
    loader = Loader(path, workers=0, shuffle=False, on_error="skip", **options)  # type: ignore[arg-type]
    with loader.iter() as it:
        return [d.text for d in it], it.stats


# -- parquet ------------------------------------------------------------------------------


def _damage_path(path: Path, column: bytes, new: bytes) -> None:
    """Overwrite the last row group's chunk path ``column`` in the footer with ``new``."""
    data = bytearray(path.read_bytes())
    start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    hits = [k for k in range(start, len(data) - 8) if data[k : k + len(column)] == column]
    assert len(hits) == 1 + 3, hits  # the schema's, then one per row group
    data[hits[-1] : hits[-1] + len(new)] = new
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("new", [b"t\xcdxt", b"teGt"], ids=["not-utf8", "another-name"])
def test_a_damaged_footer_entry_of_the_text_chunk_is_a_corrupt_row_group(
    tmp_path: Path, new: bytes
) -> None:
    path = write_parquet(tmp_path / "f.parquet", TEXTS, row_group=20)
    _damage_path(path, b"text", new)
    for workers in (0, 2):
        with pytest.raises(CorruptMember, match=r"corrupt parquet row group 2") as raised:
            list(Loader(path, workers=workers, shuffle=False))
        assert raised.value.member == "f.parquet#rg2" and raised.value.path == str(path)
    texts, stats = _stream(path)
    assert texts == TEXTS[:40] and stats.skipped_members == 1  # type: ignore[attr-defined]
    assert "corrupt parquet row group 2" in stats.skipped[0]  # type: ignore[attr-defined]


def test_a_damaged_footer_entry_of_a_column_not_read_does_not_matter(tmp_path: Path) -> None:
    """The ``id`` column's path (before the text's), not UTF-8: its chunk is not read."""
    path = write_parquet(tmp_path / "f.parquet", TEXTS, row_group=20)
    _damage_path(path, b"id", b"\xcd")
    assert [d.text for d in Loader(path, workers=0, shuffle=False)] == TEXTS


def _checksummed(path: Path, damage: bool) -> Path:
    pa = pytest.importorskip("pyarrow", minversion="15")  # page checksums: pyarrow 15
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"text": [f"hello world number {k:03d}" for k in range(30)]})
    pq.write_table(table, path, write_page_checksum=True, compression="none",
                   use_dictionary=False)  # fmt: skip
    if damage:
        data = bytearray(path.read_bytes())
        data[data.find(b"number 005")] = ord("N")  # one byte of one document
        path.write_bytes(bytes(data))
    return path


def test_a_page_that_fails_its_checksum_is_a_corrupt_row_group(tmp_path: Path) -> None:
    good = _checksummed(tmp_path / "good.parquet", damage=False)
    assert len(list(Loader(good, workers=0))) == 30
    path = _checksummed(tmp_path / "c.parquet", damage=True)
    for workers in (0, 2):
        with pytest.raises(CorruptMember, match=r"corrupt parquet row group 0 .*CRC") as raised:
            list(Loader(path, workers=workers))
        assert raised.value.member == "c.parquet#rg0" and raised.value.path == str(path)
    texts, stats = _stream(path)
    assert texts == [] and stats.skipped_members == 1  # type: ignore[attr-defined]


def test_a_dotted_name_is_the_top_level_column_of_that_name(tmp_path: Path) -> None:
    """As pyarrow's ``read_table(...).column("a.b")``: never the child ``b`` of a struct ``a``."""
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    path = tmp_path / "dot.parquet"
    struct = pa.array([{"b": "struct child 0"}, {"b": "struct child 1"}])
    pq.write_table(pa.table({"a": struct, "a.b": ["right 0", "right 1"]}), path)
    corpus = Corpus.open(path, text_column="a.b")
    assert [d.text for d in Loader(corpus, workers=0, shuffle=False)] == ["right 0", "right 1"]
    assert sorted(d.text for d in Loader(corpus, workers=2)) == ["right 0", "right 1"]
    only = tmp_path / "struct.parquet"
    pq.write_table(pa.table({"a": struct}), only)
    with pytest.raises(CorpusError, match=r"no column 'a.b' \(its columns: a\)"):
        Corpus.open(only, text_column="a.b")


def test_two_columns_of_the_text_name_are_a_file_error(owt: Owt, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    write_parquet(tmp_path / "d" / "a.parquet", ["good 0", "good 1"])
    twice = pa.Table.from_arrays([pa.array(["x", "y"]), pa.array(["z", "w"])], ["text", "text"])
    bad = tmp_path / "d" / "b.parquet"
    pq.write_table(twice, bad)
    with pytest.raises(CorpusError, match=r"2 columns named 'text'") as raised:
        Corpus.open(tmp_path / "d")
    assert raised.value.path == str(bad)
    corpus = Corpus.open(tmp_path / "d", on_error="skip")
    assert [e.path for e in corpus.skipped_files] == [str(bad)]
    texts = [d.text for d in Loader(corpus, workers=0, shuffle=False, on_error="skip")]
    assert texts == ["good 0", "good 1"]
    result = owt("stream", str(tmp_path / "d"), "-q", "-j", "0")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "b.parquet" in result.stderr and "2 columns named 'text'" in result.stderr


# -- JSON lines ---------------------------------------------------------------------------


def test_a_lone_surrogate_is_not_utf8_text(tmp_path: Path) -> None:
    """JSON's ``\\ud800`` alone: left out under strict, U+FFFD under replace, counted."""
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"text": "ok"}\n{"text": "a\\ud800b"}\n{"text": "pair \\ud83d\\ude00"}\n')
    texts, stats = _stream(path, decode_errors="replace")
    assert texts == ["ok", "a\ufffdb", "pair \U0001f600"]
    assert stats.replaced_documents == 1 and stats.skipped_documents == 0  # type: ignore[attr-defined]
    with pytest.raises(CorruptDocument, match=r"line 2: .*lone surrogate.*not UTF-8") as raised:
        list(Loader(path, workers=0, shuffle=False))
    assert raised.value.path == str(path) and raised.value.document == "s.jsonl@15"
    texts, stats = _stream(path)
    assert texts == ["ok", "pair \U0001f600"]
    assert stats.skipped_documents == 1 and stats.replaced_documents == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-le"])
def test_a_line_of_utf16_or_utf32_is_not_utf8(tmp_path: Path, encoding: str) -> None:
    """``json.loads`` takes UTF-16 and UTF-32 bytes; a JSON lines file is UTF-8 (a BOM at a
    line's start is no harm)."""
    path = tmp_path / "u.jsonl"
    wide = '{"text": "wide"}'.encode(encoding)
    path.write_bytes(b'{"text": "ok"}\n' + wide + b'\n\xef\xbb\xbf{"text": "bom"}\n')
    with pytest.raises(CorruptDocument, match=r"line 2: ") as raised:
        list(Loader(path, workers=0, shuffle=False))
    assert raised.value.path == str(path)
    for errors in ("strict", "replace"):
        texts, stats = _stream(path, decode_errors=errors)
        assert texts == ["ok", "bom"] and stats.skipped_documents == 1  # type: ignore[attr-defined]


def test_a_row_group_decoding_to_fewer_rows_than_its_footer_says_is_corrupt(
    tmp_path: Path,
) -> None:
    """A data page whose type is damaged into an index page: pyarrow skips it, and the row
    group's text decodes to no row at all."""
    path = write_parquet(tmp_path / "p.parquet", TEXTS, row_group=20, compression="none",
                         use_dictionary=False)  # fmt: skip
    unit = Corpus.open(path).units[1]
    data = bytearray(path.read_bytes())
    assert data[unit.offset : unit.offset + 2] == b"\x15\x00"  # PageHeader.type: DATA_PAGE
    data[unit.offset + 1] = 0x02  # INDEX_PAGE
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptMember, match=r"row group 1 .*0 rows decoded, not the footer's 20"):
        list(Loader(path, workers=0, shuffle=False))
    texts, stats = _stream(path)
    assert texts == TEXTS[:20] + TEXTS[40:] and stats.skipped_members == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_codec_this_pyarrow_lacks_is_said_at_the_open_not_a_corrupt_row_group(
    tmp_path: Path, on_error: str
) -> None:  # fmt: skip
    """LZO (Hadoop's, Spark's writers): pyarrow has no codec for it. Each row group was a
    "corrupt parquet row group", skipped under skip: a run of no document. The footer says
    the codec; the file is refused at the open, naming it, whatever ``on_error``."""
    import struct

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"document {i}" for i in range(20)]}), path,
                   compression="brotli", row_group_size=10)  # fmt: skip
    data = bytearray(path.read_bytes())
    start = len(data) - 8 - struct.unpack("<I", data[-8:-4])[0]
    footer = bytes(data[start:-8])
    assert footer.count(b"\x15\x08") == 2  # (codec, field 4 of each chunk: BROTLI, 4)
    data[start:-8] = footer.replace(b"\x15\x08", b"\x15\x06")  # (LZO, 3)
    path.write_bytes(bytes(data))
    said = r"row group 0's column 'text' is compressed with LZO, which this pyarrow cannot"
    with pytest.raises(Unsupported, match=said):  # (the installation's: never a skip)
        list(Loader(Corpus.open(path, on_error=on_error), workers=0, on_error=on_error))
