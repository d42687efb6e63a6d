"""Files of records rather than tars: parquet (by its magic bytes) and JSON lines (by its
name), local or remote alike (anything ``outer.Readable``)."""

from __future__ import annotations

from openwebtext.formats import PARQUET, detect
from openwebtext.index.jsonl import is_jsonl, jsonl_units
from openwebtext.index.outer import Readable
from openwebtext.index.parquet import parquet_units
from openwebtext.records import Unit

__all__ = ["table_units"]


def table_units(
    f: Readable, name: str, subset: str, base: str, text_column: str
) -> list[Unit] | None:
    """The units of a parquet or JSON lines file, or None: it is neither.

    Raises:
        CorpusError: a damaged footer, no such column, an empty file.
    """
    if is_jsonl(base):
        return jsonl_units(f, name, subset, base, text_column)
    if f.size >= 4 and detect(f.pread(4, 0)) == PARQUET:
        return parquet_units(f, name, subset, base, text_column)
    return None
