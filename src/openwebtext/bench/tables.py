"""The ceiling of record files: what pyarrow (parquet) or ``json.loads`` (JSON lines) alone
do with the same units on N processes.

For a parquet corpus the ceiling is pyarrow reading the same row groups' text column
(``ParquetFile.read_row_group``, its own I/O and decoding), with nothing after: no UTF-8
check, no document table, no transfer. For JSON lines it is reading each unit, decompressing
it (gzip, zstd) and one ``json.loads`` per line. Remote record files have no ceiling yet.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from openwebtext import Options
from openwebtext.formats import PARQUET, decompress
from openwebtext.index import split_jsonl_kind
from openwebtext.records import Unit

__all__ = ["JSON_LOADS", "PYARROW", "table_decoders"]

PYARROW, JSON_LOADS = "pyarrow read_row_group", "json.loads"

_files: dict[str, Any] = {}  # per process: each file's ParquetFile, opened once


def _column(meta: Any, unit: Unit) -> str:
    """The column whose chunk in the unit's row group starts where the unit does."""
    group = meta.row_group(unit.member_index)
    for k in range(group.num_columns):
        chunk = group.column(k)
        starts = [chunk.data_page_offset]
        if chunk.has_dictionary_page and chunk.dictionary_page_offset:
            starts.append(chunk.dictionary_page_offset)
        if min(starts) == unit.offset:
            return str(chunk.path_in_schema)
    raise ValueError(f"{unit.path}: no column chunk at byte {unit.offset}")


def _with_pyarrow(unit: Unit) -> int:
    """Text bytes of one row group's text column, read and decoded by pyarrow alone."""
    import pyarrow.parquet as pq

    source = _files.get(unit.path)
    if source is None:
        source = _files[unit.path] = pq.ParquetFile(unit.path)
    table = source.read_row_group(unit.member_index, columns=[_column(source.metadata, unit)])
    return sum(chunk.buffers()[2].size for chunk in table.column(0).chunks if chunk.buffers()[2])


def _with_json(unit: Unit) -> int:
    """Text bytes of one JSON lines unit: read, decompressed, ``json.loads`` per line."""
    kind = split_jsonl_kind(unit.kind)
    assert kind is not None
    compression, field = kind
    fd = os.open(unit.path, os.O_RDONLY)
    try:
        raw = os.pread(fd, unit.size, unit.offset)
    finally:
        os.close(fd)
    data = decompress(raw, compression, Options.max_member_bytes) if compression else raw
    return sum(len(json.loads(line)[field]) for line in data.splitlines() if line.strip())


def table_decoders(units: Sequence[Unit]) -> dict[str, Callable[[Unit], int]] | None:
    """The ceiling's decoders for a corpus of record files, or None: it is not one."""
    if units and all(u.kind == PARQUET for u in units):
        return {PYARROW: _with_pyarrow}
    if units and all(split_jsonl_kind(u.kind) is not None for u in units):
        return {JSON_LOADS: _with_json}
    return None
