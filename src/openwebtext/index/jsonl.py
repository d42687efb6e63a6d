"""JSON lines files as units: a compressed file is one unit, a plain one is cut at lines.

A JSON lines file is known by its name (``.jsonl``, ``.ndjson``, each optionally ``.gz`` or
``.zst``; ``.json.gz``, ``.json.zst``): plain JSON has no magic bytes. Each non-blank line is
one object, and its field ``text`` (or the one named, ``--text-column``) one document. A
compressed file is read whole (a stream cannot be entered in the middle), under
``max_member_bytes``; a plain file is cut into units of about ``CHUNK_BYTES``, each ending at a
line's end, found by reading a little at each cut (locally or by range).

The unit's ``kind`` is the format (``jsonl``, ``jsonl.gz``, ``jsonl.zst``), followed by
``:FIELD`` when the field is not ``text``: the field is part of how the bytes are read, so
a stream state of one field never resumes on another (``Corpus.fingerprint`` holds kinds).
A unit's ``member`` is the file's name (``<file>@<byte>`` for the chunks after the first);
a document's name is ``<file>@<byte>``, where its line starts in the (decompressed) file.
"""

from __future__ import annotations

import json
import lzma
import zlib
from typing import Any

from openwebtext.errors import CorpusError, one_line
from openwebtext.formats import GZIP, ZSTD, LimitExceeded, Truncated, decompress, detect
from openwebtext.index.outer import LFS_POINTER, Readable, placeholder
from openwebtext.records import Unit

__all__ = [
    "CHUNK_BYTES",
    "JSONL",
    "is_jsonl",
    "jsonl_kind",
    "jsonl_units",
    "split_jsonl_kind",
]

JSONL = "jsonl"
#: A plain file's units hold about this many bytes (cut at the next line's end).
CHUNK_BYTES = 64 << 20
_SEARCH = 64 << 10
#: Bytes read at a file's start: its magic, and its first record, whose fields are checked
#: against the field asked for when it begins there (decompressed: at most 16 times as many).
_HEAD = 64 << 10
#: ``.json.gz`` and ``.json.zst`` too: allenai/c4's and Dolma's JSON lines are named so (a plain
#: ``.json`` is not: a folder's ``config.json`` or ``dataset_info.json`` is no corpus).
_SUFFIXES = {".jsonl": "", ".ndjson": "", ".jsonl.gz": GZIP, ".ndjson.gz": GZIP,
             ".json.gz": GZIP, ".jsonl.zst": ZSTD, ".ndjson.zst": ZSTD,
             ".json.zst": ZSTD}  # fmt: skip
_KINDS = {"": JSONL, GZIP: "jsonl.gz", ZSTD: "jsonl.zst"}
_COMPRESSION = {kind: compression for compression, kind in _KINDS.items()}


def _compression(name: str) -> str | None:
    lower = name.lower()
    for suffix, compression in _SUFFIXES.items():
        if lower.endswith(suffix):
            return compression
    return None


def is_jsonl(name: str) -> bool:
    """Whether a file's name says it is JSON lines (plain, ``.gz`` or ``.zst``)."""
    return _compression(name) is not None


def jsonl_kind(name: str, field: str) -> str:
    """The units' kind of the JSON lines file ``name`` whose documents are ``field``."""
    kind = _KINDS[_compression(name) or ""]
    return kind if field == "text" else f"{kind}:{field}"


def split_jsonl_kind(kind: str) -> tuple[str, str] | None:
    """``(compression, field)`` of a JSON lines unit's kind ("" plain), or None: not one."""
    base, _, field = kind.partition(":")
    if base not in _COMPRESSION:
        return None
    return _COMPRESSION[base], field or "text"


def jsonl_units(
    f: Readable, name: str, subset: str, base: str, field: str, chunk: int | None = None
) -> list[Unit]:
    """The units of one JSON lines file (see the module docstring).

    Raises:
        CorpusError: an empty file, a Git LFS pointer, or one whose bytes are not the
            compression its name says.
    """
    size = f.size
    if size == 0:
        raise CorpusError("empty file", path=name)
    kind = jsonl_kind(base, field)
    compression = _compression(base) or ""
    head = f.pread(_HEAD, 0)
    if head.startswith(LFS_POINTER):
        raise CorpusError(f"named JSON lines, but{placeholder(head)[1:]}", path=name)
    if compression:
        found = detect(head)
        if found != compression:
            raise CorpusError(
                f"named {compression} JSON lines, but its bytes are {found or 'not compressed'}",
                path=name,
            )
    _has_field(_first_records(head, compression, whole=size <= len(head)), field, name)
    if compression:
        return [Unit(name, base, 0, size, kind, subset, 0)]
    # A plain file's bytes: magic at their start only (a tar's "ustar" at byte 257 may lie in
    # a document's text), never of a file that begins as JSON lines do.
    if head.lstrip()[:1] != b"{":
        found = detect(head[:256])  # (parquet's PAR1 too)
        if found is not None:
            raise CorpusError(f"named plain JSON lines, but its bytes are {found}", path=name)
    chunk = chunk or CHUNK_BYTES
    units: list[Unit] = []
    start = 0
    while start < size:
        end = _line_end(f, start + chunk) if start + chunk < size else size
        member = base if start == 0 else f"{base}@{start}"
        units.append(Unit(name, member, start, end - start, kind, subset, len(units)))
        start = end
    return units


def _first_records(head: bytes, compression: str, whole: bool) -> list[dict[str, Any]] | None:
    """The records of the lines that end in the first ``_HEAD`` bytes of a JSON lines file
    (``head``; the file ``whole``): the objects among them, or None when fewer than two
    lines end there (too little to judge the file by: one is a bad document at most)."""
    if compression:
        try:
            head = decompress(head, compression, 16 * _HEAD)
            whole = True  # (its stream ended inside the head)
        except Truncated as exc:
            head, whole = exc.data, False
        except (LimitExceeded, ImportError, lzma.LZMAError, zlib.error, OSError, ValueError):
            return None  # (a missing extra, corrupt data: the reader raises it, naming it)
    lines = [line for line in head.split(b"\n") if line.strip()]
    if not whole and not head.endswith(b"\n"):
        lines = lines[:-1]  # (cut by the head's end)
    if len(lines) < 2:  # (one record, a file's only one too, is a bad document at most)
        return None
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # (a long integer, bytes not UTF-8: the reader
            return None  # reads more than ``json.loads``; a line unknown here is no verdict)
        if isinstance(record, dict):
            records.append(record)
    return records


_JSON_KINDS = {int: "number", float: "number", bool: "boolean", list: "array", dict: "object",
               type(None): "null"}  # fmt: skip


def _has_field(records: list[dict[str, Any]] | None, field: str, name: str) -> None:
    """Check that a record at the start of ``name`` has ``field``, as a parquet file is
    checked to have its text column: a field no record has would make every line a skip;
    so would a field named (``--text-column``) that holds no text in any (the default
    ``text`` holding a number is damage, each such line a bad document). One line without it
    among others is a bad document, left to the reader.

    Raises:
        CorpusError: none of the records has the field as text, naming the fields the first
            has (or what the field holds).
    """
    if not records or any(isinstance(record.get(field), str) for record in records):
        return
    if field == "text" and any(field in record for record in records):
        return  # (the default field, there but not text: the records' damage, line by line)
    first = records[0]
    fields = ", ".join(one_line(k, name=True) for k in list(first)[:12]) or "none"
    more = ", …" if len(first) > 12 else ""
    said = "its first record has" if len(records) == 1 else f"its first {len(records)} records have"
    if any(field in record for record in records):  # (a number, a list: no text)
        value = next(r[field] for r in records if field in r)
        kind = _JSON_KINDS.get(type(value), "value")
        said = f"{said} no text in field {field!r} (the first's: a JSON {kind})"
    else:
        said = f"{said} no field {field!r} (the first's fields: {fields}{more})"
    raise CorpusError(
        f"JSON lines: {said}; name the text field with --text-column (Corpus.open(text_column=))",
        path=name,
    )


def _line_end(f: Readable, at: int) -> int:
    """Just past the first newline at or after byte ``at - 1`` (the file's end if none)."""
    position = at - 1
    while position < f.size:
        window = f.pread(_SEARCH, position)
        if not window:
            break
        newline = window.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(window)
    return f.size
