"""Files of records rather than tars: parquet (by its magic bytes) and JSON lines (by its
name), local or remote alike (anything ``outer.Readable``)."""

from __future__ import annotations

from openwebtext.errors import CorpusError
from openwebtext.formats import MAGIC_BYTES, PARQUET, detect
from openwebtext.index.jsonl import is_jsonl, jsonl_units
from openwebtext.index.outer import Readable, placeholder
from openwebtext.index.parquet import ENCRYPTED_MAGIC, parquet_units
from openwebtext.records import Unit

__all__ = ["table_units"]


def table_units(
    f: Readable, name: str, subset: str, base: str, text_column: str
) -> list[Unit] | None:
    """The units of a parquet or JSON lines file, or None: it is neither.

    Raises:
        CorpusError: a damaged footer, no such column, an empty file, a file named
            ``.parquet`` whose bytes are not (a Git LFS pointer, say).
    """
    if is_jsonl(base):
        return jsonl_units(f, name, subset, base, text_column)
    head = f.pread(MAGIC_BYTES, 0) if f.size else b""
    if detect(head) == PARQUET:
        return parquet_units(f, name, subset, base, text_column)
    if base.lower().endswith(".parquet"):  # never read as a tar, nor left out as "not parquet"
        if head[:4] == ENCRYPTED_MAGIC:  # (its footer encrypted: refused as unsupported)
            return parquet_units(f, name, subset, base, text_column)
        what = "empty" if not head else "not parquet (no PAR1 magic)"
        raise CorpusError(f"named parquet, but its bytes are {what}{placeholder(head)}", path=name)
    return None
