"""Local indexing: the units of one local file (inner compressed members) and where they lie.

Only outer tar headers and the first bytes of each member are read; nothing is
decompressed. A unit is one inner member: ``(path, member, offset, size, kind)``.

Accepted inputs (paths, folders or glob patterns):

- a plain outer tar whose regular members are compressed inner tars
  (``urlsf_subsetNN.tar``, or ``openwebtext.tar`` after ``xz -d``);
- a compressed inner member on its own (``urlsf_subset00-1_data.xz``);
- a plain tar of documents (an inner tar that was never compressed);
- a parquet file (a unit per row group, ``index.parquet``) or a JSON lines file (``.jsonl``,
  ``.jsonl.gz``, ``.jsonl.zst``: a unit per file or per chunk of lines, ``index.jsonl``);
- a folder or a glob pattern of any of these (``paths.index_inputs``, with
  ``inputs.find_files``: other files there, such as README.md or checksums, are left out
  and mentioned).
"""

from __future__ import annotations

import os
from pathlib import Path

from openwebtext.errors import CorpusError, read_error
from openwebtext.formats import TAR
from openwebtext.index.outer import LocalFile, file_kind, walk_outer_tar
from openwebtext.index.tables import table_units
from openwebtext.records import Unit
from openwebtext.source import FileInfo, Storage

__all__ = ["LocalFile", "index_file", "index_file_before_damage"]


def index_file(path: Path, text_column: str = "text") -> list[Unit]:
    """List the units of one file (see the module docstring for what it may be).

    Raises:
        CorpusError: the file cannot be read, or its tar headers are damaged.
        UnknownFormat: the file is none of the formats (a member in none of them
            becomes a unit that fails when it is read).
    """
    units, damage = index_file_before_damage(path, text_column)
    if damage is not None:
        raise damage
    return units


def index_file_before_damage(
    path: Path, text_column: str = "text", storage: Storage | None = None
) -> tuple[list[Unit], CorpusError | None]:
    """The units of one file, and the damage to its outer tar headers that ended the
    listing, if any: the members before a damaged header are intact (each is checked
    when read), so ``on_error="skip"`` keeps them. With ``storage``, the file's identity
    there, from the descriptor it is indexed with before a byte is read (``FileInfo``): a
    file changed while it is indexed is one changed since (``noted_versions``).

    Raises:
        CorpusError: the file cannot be read, or is no tar of members at all.
        UnknownFormat: the file is none of the formats.
    """
    name = str(path)
    subset = path.name.split(".", 1)[0]
    try:
        with open(path, "rb") as f:
            stat = os.fstat(f.fileno())
            size = stat.st_size
            if storage is not None:
                storage.remember(name, FileInfo.of_local(stat))
            local = LocalFile(f.fileno(), size)
            table = table_units(local, name, subset, path.name, text_column)
            if table is not None:
                return table, None
            kind = file_kind(local, name)
            if kind != TAR:
                return [Unit(name, path.name, 0, size, kind, subset, 0)], None
            return walk_outer_tar(local, name, subset, path.name)
    except OSError as exc:
        raise read_error(exc, name, kind=CorpusError) from exc
