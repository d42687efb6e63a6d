"""Reading units of record files: a parquet row group's text column, or JSON lines.

Both give what a tar member gives (``read.Member``'s fields): one ``bytes`` buffer of every
document's UTF-8 text end to end, and the name, offset and size of each document in it, plus
the documents left out (a null text, a line that is not JSON or lacks the field). Runs in
the workers, after the unit's bytes were read (by ``pread``, or by range for a URL).

A row group is decoded by pyarrow from the column chunk's bytes alone: pyarrow reads the
file through ``_Spans``, which holds those bytes at their offset, against the footer
(``index.footer_of``), so nothing else of the file is read. Its text column's values are
already one buffer with offsets: the member's bytes are that buffer, copied once.

What a chunk decodes to is bounded by its pages, never by the footer alone
(``pages.chunk_pages``): their headers say how much each decompresses to (the codec holds them
to it) and how its values are encoded.
"""

from __future__ import annotations

import io
import json
import re
import zlib
from array import array
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from openwebtext.engine.pages import chunk_pages
from openwebtext.errors import (
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    TruncatedMember,
    read_error,
)
from openwebtext.formats import LimitExceeded, Truncated, decompress, detect
from openwebtext.index import parse_footer, split_jsonl_kind
from openwebtext.records import Names, Unit

__all__ = ["Footer", "Records", "jsonl_records", "parquet_records"]


class Records(NamedTuple):
    """A unit's documents: their bytes end to end, names, offsets, sizes, and those left out
    (their offset -1)."""

    data: bytes
    names: Sequence[str]
    offsets: list[int]
    sizes: list[int]
    dropped: list[CorruptMember]
    replaced: int = 0
    """Documents kept with U+FFFD in place of bytes that are not UTF-8 (``replace``)."""


class Footer:
    """A parquet file's parsed footer (``index.parse_footer``: an encrypted file, or one whose
    metadata pyarrow would abort on, is refused), and the first row of each row group."""

    def __init__(self, footer: bytes, path: str):
        self.meta = parse_footer(footer, path)
        rows = [self.meta.row_group(k).num_rows for k in range(self.meta.num_row_groups)]
        self.first_rows = np.concatenate([[0], np.cumsum(rows)]).tolist()

    def column_at(self, group: int, offset: int) -> tuple[int, str, Any] | None:
        """The leaf index, name and chunk metadata of the column whose chunk in row group
        ``group`` starts at byte ``offset`` (``index.column_of``'s), or None: none does.

        The walk reads the metadata of the chunks before it through pyarrow, which aborts
        the process on an encrypted chunk or on one past the schema's columns: the footer
        passed ``index.parse_footer``, which refuses a file of either (its cached footer too).

        Raises:
            ValueError: the footer's entry for that chunk is damaged: its path is not UTF-8,
                or not the schema's, or the column is not a top-level one.
        """
        if group >= self.meta.num_row_groups:
            return None
        row_group = self.meta.row_group(group)
        for k in range(row_group.num_columns):
            chunk = row_group.column(k)
            dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            start = min(chunk.data_page_offset, dictionary or chunk.data_page_offset)
            if start != offset:
                continue
            leaf = self.meta.schema.column(k)
            if leaf.path != leaf.name:
                raise ValueError(f"the chunk at byte {offset} is of nested column {leaf.path!r}")
            if chunk.path_in_schema != leaf.path:  # a path not UTF-8: UnicodeDecodeError
                why = f"chunk {k} names column {chunk.path_in_schema!r}, the schema {leaf.path!r}"
                raise ValueError(why)
            return k, str(leaf.name), chunk
        return None


class _Spans(io.RawIOBase):
    """A file of ``size`` bytes of which only ``data`` at ``offset`` is there: what pyarrow
    reads a column chunk through. A read elsewhere is an ``OSError``."""

    def __init__(self, size: int, offset: int, data: bytes):
        self.size = size
        self.start = offset
        self.data = data
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, position: int, whence: int = 0) -> int:
        self.position = {0: 0, 1: self.position, 2: self.size}[whence] + position
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: Any) -> int:
        at = self.position - self.start
        if at < 0 or at > len(self.data):
            raise OSError(f"read at byte {self.position}, outside the column chunk")
        chunk = self.data[at : at + len(buffer)]
        buffer[: len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)


def parquet_records(raw: bytes, unit: Unit, footer: Footer, file_size: int, limit: int) -> Records:
    """The documents of one row group, from its text column's chunk (``raw``).

    The column is read by its leaf index, never by name (a dotted name may also be a path
    into a struct), and the pages' CRCs are checked where the writer put them.

    Raises:
        CorruptMember: the chunk does not decode, fails its page checksums, decodes to
            another number of rows than the footer's or has a damaged footer entry (naming the
            row group), or the file is no longer the one indexed (no column chunk where the
            unit says).
        MemberTooLarge: its pages (or its footer) say it passes ``limit`` bytes
            uncompressed, or its text does once decoded (a dictionary page of one long value
            repeated: a few hundred bytes of file, gigabytes of text).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    group = unit.member_index
    try:
        found = footer.column_at(group, unit.offset)
    except MemoryError:  # (pyarrow's ArrowMemoryError too: the machine's, not the file's)
        raise
    except (ValueError, pa.ArrowException) as exc:
        raise CorruptMember(
            f"corrupt parquet row group {group}: its footer entry: {exc}", unit.path, unit.member
        ) from exc
    if found is None:
        raise CorruptMember(
            f"no column chunk of row group {group} at byte {unit.offset}: the file changed "
            "since it was indexed (owt index --force)",
            unit.path,
            unit.member,
        )
    leaf, column, chunk = found
    try:
        pages, plain, widest = chunk_pages(raw, chunk.num_values)
    except ValueError as exc:
        raise CorruptMember(
            f"corrupt parquet row group {group} (column {column!r}): {exc}", unit.path, unit.member
        ) from exc
    size = max(chunk.total_uncompressed_size, pages)
    if size > limit:
        raise MemberTooLarge(
            f"row group {group}'s {column!r} holds {size} bytes uncompressed, past "
            f"max_member_bytes={limit}", unit.path, unit.member,
        )  # fmt: skip
    try:
        source = pq.ParquetFile(
            _Spans(file_size, unit.offset, raw), metadata=footer.meta,
            page_checksum_verification=True,  # (where the writer put CRCs in the pages)
        )  # fmt: skip
        if not plain:  # a dictionary's or a delta's values may repeat: read a few at once
            array = _bounded(source, group, leaf, column, widest, limit, unit)  # (<= size)
        else:  # plain values: no longer decoded than their pages, bounded above
            # (``source.reader``: by index; ``read_row_group(columns=["a.b"])`` would read a
            # struct a's field b too)
            array = _one_column(source.reader.read_row_group(group, column_indices=[leaf]))
            array = _values(array.combine_chunks())
        if array.type == pa.string_view():
            array = array.cast(pa.large_string())
        if array.type not in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
            raise ValueError(f"its values are {array.type}, not text")
        rows = footer.first_rows[group + 1] - footer.first_rows[group]
        if len(array) != rows:  # a page pyarrow skipped (a damaged page type), say
            raise ValueError(f"{len(array)} rows decoded, not the footer's {rows}")
    except MemoryError:  # (pyarrow's ArrowMemoryError too: the machine's, not the file's)
        raise
    except OSError as exc:  # (the machine's shortage: never a damaged row group's skip)
        what = f"corrupt parquet row group {group} (column {column!r})"
        # (pyarrow's OSError of bytes in memory: corrupt, unless the machine ran out)
        raise read_error(exc, unit.path, unit.member, CorruptMember, what) from exc
    except (ValueError, pa.ArrowException) as exc:
        raise CorruptMember(
            f"corrupt parquet row group {group} (column {column!r}): {exc}", unit.path, unit.member
        ) from exc
    wide = array.type in (pa.large_string(), pa.large_binary())
    _, value_offsets, values = array.buffers()
    n = len(array)
    ends = np.frombuffer(value_offsets, dtype=np.int64 if wide else np.int32)
    ends = ends[array.offset : array.offset + n + 1]
    start, stop = (int(ends[0]), int(ends[-1])) if n else (0, 0)
    data = values[start:stop].to_pybytes() if n and values is not None else b""
    offsets = (ends[:-1] - start).tolist()
    sizes = np.diff(ends).tolist()
    base = unit.member.rsplit("#rg", 1)[0]
    first = footer.first_rows[group]
    names = Names(base, range(first, first + n))
    dropped: list[CorruptMember] = []
    if array.null_count:
        for k in np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False)).tolist():
            offsets[k] = -1
            dropped.append(
                CorruptDocument(
                    f"row {first + k}: its {column!r} is null", unit.path, unit.member, names[k]
                )
            )
    return Records(data, names, offsets, sizes, dropped)


def _bounded(
    source: Any, group: int, leaf: int, column: str, widest: int, limit: int, unit: Unit
) -> Any:
    """A row group's column decoded a few rows at a time, stopped past ``limit`` bytes: a
    dictionary (or a delta of prefixes) may repeat a value of up to ``widest`` bytes on every
    row, so each batch holds at most ``limit // widest`` rows, and the most ever decoded is
    about twice the limit (the batches of a row group: its size over the limit's share of
    ``widest``, not of the whole chunk, whose batches grew with it: quadratic)."""
    import pyarrow as pa

    rows = max(1, min(1 << 16, limit // max(widest, 1)))
    parts: list[Any] = []
    total = 0
    for batch in source.reader.iter_batches(rows, row_groups=[group], column_indices=[leaf]):
        array = _values(_one_column(batch))  # (a dictionary's measured as its values)
        total += array.nbytes
        if total > limit:
            raise MemberTooLarge(
                f"row group {group}'s {column!r} decodes to more than max_member_bytes={limit}",
                unit.path,
                unit.member,
            )
        parts.append(array)
    if not parts:
        return pa.array([], pa.string())
    return pa.concat_arrays(parts) if len(parts) > 1 else parts[0]


def _values(array: Any) -> Any:
    """A column read as a dictionary (the Arrow schema stored in the file says so: a pandas
    ``category``) as its values, the same as the file written without it; any other as is."""
    import pyarrow as pa

    return array.cast(array.type.value_type) if pa.types.is_dictionary(array.type) else array


def _one_column(table: Any) -> Any:
    """The one column pyarrow read of a row group (a table or a batch).

    Raises:
        ValueError: there is not one (a damaged footer pyarrow read past).
    """
    if table.num_columns != 1:
        raise ValueError(f"{table.num_columns} columns read, not 1")
    return table.column(0)


def jsonl_records(
    raw: bytes, unit: Unit, limit: int, truncated: bool, errors: str = "strict"
) -> Records:
    """The documents of a JSON lines unit: the field of each non-blank line's object.

    A line that is not a JSON object (nested too deep to parse, only whitespace), or whose
    field is missing or not a string, is left out as a ``CorruptDocument`` naming its line;
    an empty line is no document. A line that is not UTF-8 (UTF-16 and UTF-32 are not), or
    whose text holds a lone surrogate (an escape such as ``\\ud800``), is left out under
    ``errors="strict"``, or read with U+FFFD in place of each bad part under ``"replace"``
    (counted in ``Records.replaced``). A compressed file cut short keeps the lines before the
    cut (a ``TruncatedMember`` in ``dropped``).

    Raises:
        CorruptMember: compressed data that does not decompress, or that holds another format
            (a tar, parquet) and no line of JSON lines.
        MemberTooLarge: a compressed file past ``limit`` bytes once decompressed.
    """
    kind = split_jsonl_kind(unit.kind)
    assert kind is not None
    compression, field = kind
    dropped: list[CorruptMember] = []
    cut = f"file is truncated: {len(raw)} of {unit.size} bytes" if truncated else None
    text = raw
    if compression:
        try:
            text = decompress(raw, compression, limit)
        except LimitExceeded:
            raise MemberTooLarge(
                f"decompresses to more than max_member_bytes={limit}", unit.path, unit.member
            ) from None
        except Truncated as exc:
            text, cut = exc.data, cut or f"corrupt {compression} data: {exc}"
        except (zlib.error, OSError, EOFError, ValueError) as exc:
            why = cut or f"corrupt {compression} data: {exc}"
            raise CorruptMember(why, unit.path, unit.member) from exc
    if cut is not None:
        text = text[: text.rfind(b"\n") + 1]  # the lines before the cut, whole
        dropped.append(
            TruncatedMember(f"{cut}: the lines before it are kept", unit.path, unit.member)
        )
    records = _lines(text, unit, field, 0 if compression else unit.offset, dropped, errors)
    none_read = bool(records.offsets) and max(records.offsets) < 0  # (lines, but no document)
    found = detect(text[:512]) if compression and none_read else None
    if found is not None:  # (its bytes another format's, no line of JSON lines: said whole)
        why = f"named {compression} JSON lines, but its {compression} data holds {found}"
        raise CorruptMember(f"{why}, not JSON lines", unit.path, unit.member)
    return records


#: A UTF-16 surrogate alone (JSON's ``\ud800`` escape gives one): no UTF-8 encodes it.
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotUtf8(ValueError):
    """A line, or the text it holds, that is not UTF-8."""


def _lines(
    text: bytes, unit: Unit, field: str, at: int, dropped: list[CorruptMember], errors: str
) -> Records:
    # The first chunk's member is the file's name; the others', ``<name>@<byte>``.
    base = unit.member if unit.offset == 0 else unit.member.rsplit("@", 1)[0]
    where = f" of the chunk at byte {unit.offset}" if at else ""
    parts: list[bytes] = []
    starts = array("q")  # (each line's first byte: its document's name)
    offsets: list[int] = []
    sizes: list[int] = []
    position = 0
    line_start = 0
    replaced = 0
    for number, line in enumerate(text.split(b"\n"), 1):
        start, line_start = line_start, line_start + len(line) + 1
        if line in (b"", b"\r"):  # an empty line (or the file's last newline): no document
            continue
        try:
            if not line.strip():
                raise ValueError("a line of whitespace only")
            source, bad = _decoded(line, errors)
            value = _loads(source)
            if not isinstance(value, dict):
                raise ValueError(f"a JSON {type(value).__name__}, not an object")
            if field not in value:
                raise ValueError(f"no field {field!r}")
            document = value[field]
            if not isinstance(document, str):
                raise ValueError(f"its {field!r} is not a string ({type(document).__name__})")
            try:
                encoded = document.encode("utf-8")
            except UnicodeEncodeError as exc:
                if errors != "replace":
                    why = f"its {field!r} holds a lone surrogate at character {exc.start}"
                    raise _NotUtf8(f"{why}, not UTF-8 text") from None
                encoded, bad = _SURROGATE.sub("\ufffd", document).encode("utf-8"), True
        except (ValueError, RecursionError) as exc:
            why = "nested too deep to parse" if isinstance(exc, RecursionError) else str(exc)
            if not isinstance(exc, _NotUtf8):
                why = f"not a JSON object with a string {field!r}: {why}"
            reason = f"line {number}{where}: {why}"
            name = f"{base}@{at + start}"
            dropped.append(CorruptDocument(reason, unit.path, unit.member, name))
            starts.append(at + start)
            offsets.append(-1)
            sizes.append(0)
            continue
        replaced += bad
        starts.append(at + start)
        offsets.append(position)
        sizes.append(len(encoded))
        parts.append(encoded)
        position += len(encoded)
    return Records(b"".join(parts), Names(base, starts, "@"), offsets, sizes, dropped, replaced)


class _LongInt:
    """An integer of more digits than ``int()`` takes from a string (Python's
    ``sys.get_int_max_str_digits()``): a field the reader does not use, or not text."""


def _int(digits: str) -> int | _LongInt:
    try:
        return int(digits)
    except ValueError:
        return _LongInt()


def _loads(source: str) -> Any:
    """A line's JSON value; an integer too long for ``int()`` is a ``_LongInt`` (the line is
    parsed again for it only: the first parse keeps ``json``'s own integers).

    Raises:
        ValueError: not JSON.
        RecursionError: nested too deep.
    """
    try:
        return json.loads(source)
    except ValueError:
        return json.loads(source, parse_int=_int)  # (JSON that is wrong fails again)


def _decoded(line: bytes, errors: str) -> tuple[str, bool]:
    """A line's text, without the BOM it may start with, and whether bytes of it that are not
    UTF-8 became U+FFFD (``errors="replace"``). UTF-8 only: ``json.loads`` would take
    UTF-16 and UTF-32 bytes too.

    Raises:
        _NotUtf8: a line that is not UTF-8, under ``errors="strict"``.
    """
    try:
        source, bad = line.decode("utf-8"), False
    except UnicodeDecodeError as exc:
        if errors != "replace":
            raise _NotUtf8(f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None
        source, bad = line.decode("utf-8", "replace"), True
    return (source[1:] if source[:1] == "\ufeff" else source), bad
