"""Index: find the units of work (inner compressed members) and where they lie.

Only outer tar headers and the first bytes of each member are read; nothing is
decompressed. A unit is one inner member: ``(path, member, offset, size, kind)``.

Accepted inputs (paths, folders or glob patterns):

- a plain outer tar whose regular members are compressed inner tars
  (``urlsf_subsetNN.tar``, or ``openwebtext.tar`` after ``xz -d``);
- a compressed inner member on its own (``urlsf_subset00-1_data.xz``);
- a plain tar of documents (an inner tar that was never compressed);
- a folder or a glob pattern of any of these (see ``openwebtext.index.inputs``: other
  files there, such as README.md or checksums, are left out and mentioned).
"""

from __future__ import annotations

import itertools
import logging
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from openwebtext.errors import CorpusError, UnknownFormat
from openwebtext.formats import MAGIC_BYTES, TAR, detect, is_empty_tar
from openwebtext.index.inputs import find_files
from openwebtext.records import Unit
from openwebtext.source import Storage, is_url

__all__ = [
    "Indexed",
    "index_file",
    "index_file_before_damage",
    "index_inputs",
    "index_paths",
]

log = logging.getLogger("openwebtext")

_KNOWN = "a tar, or xz, gzip, bzip2 or zstd data"




def _head(f: BinaryIO, offset: int) -> bytes:
    return _pread(f, MAGIC_BYTES, offset)


def _pread(f: BinaryIO, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset``: a local file's, or a remote one's (``storage.RangeFile``)."""
    pread = getattr(f, "pread", None)
    if pread is not None:
        data: bytes = pread(size, offset)
        return data
    return os.pread(f.fileno(), size, offset)


def index_file(path: Path) -> list[Unit]:
    """List the units of one file (see the module docstring for what it may be).

    Raises:
        CorpusError: the file cannot be read, or its tar headers are damaged.
        UnknownFormat: the file is none of the formats (a member in none of them
            becomes a unit that fails when it is read).
    """
    units, damage = index_file_before_damage(path)
    if damage is not None:
        raise damage
    return units


def index_file_before_damage(path: Path) -> tuple[list[Unit], CorpusError | None]:
    """The units of one file, and the damage to its outer tar headers that ended the
    listing, if any: the members before a damaged header are intact (each is checked
    when read), so ``on_error="skip"`` keeps them.

    Raises:
        CorpusError: the file cannot be read, or is no tar of members at all.
        UnknownFormat: the file is none of the formats.
    """
    name = str(path)
    subset = path.name.split(".", 1)[0]
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise CorpusError("empty file", path=name)
            head = _head(f, 0)
            kind = detect(head)
            if kind is None and is_empty_tar(head):
                raise CorpusError("empty tar: it holds no member", path=name)
            if kind is None:
                raise UnknownFormat(f"not {_KNOWN}", path=name)
            if kind != TAR:
                return [Unit(name, path.name, 0, size, kind, subset, 0)], None
            return _index_outer_tar(f, name, size, subset, path.name)
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", path=name) from exc


def _index_outer_tar(
    f: BinaryIO, name: str, size: int, subset: str, base: str
) -> tuple[list[Unit], CorpusError | None]:
    """Units of an outer tar, and the damage to its headers: what follows it is lost.

    Problems with one member (cut short, empty, unknown format) become units
    that fail when read, so that the error policy decides (``Reader.read``).
    """
    members: list[tarfile.TarInfo] = []
    damage: CorpusError | None = None
    try:
        with tarfile.open(fileobj=f, mode="r:") as tar:
            for m in tar:
                if m.isreg():
                    members.append(m)
            end = tar.offset
    except (tarfile.TarError, EOFError) as exc:
        # A member cut short by the end of the file stays a unit: reading it fails.
        if not (members and members[-1].offset_data + members[-1].size > size):
            last = members[-1].name if members else None
            where = " after this member" if last else ""
            damage = CorpusError(f"broken tar{where}: {exc}", path=name, member=last)
            damage.__cause__ = exc
    else:
        if not any(m.offset_data + m.size > size for m in members):
            try:
                _check_end(f, name, end, size, members[-1].name if members else None)
            except CorpusError as exc:
                damage = exc
    if not members:
        raise damage or CorpusError("tar holds no file (only folders, links or devices)", path=name)
    units: list[Unit] = []
    for i, m in enumerate(members):
        head = _pread(f, min(MAGIC_BYTES, m.size), m.offset_data)
        kind = detect(head) or ""
        units.append(Unit(name, m.name, m.offset_data, m.size, kind, subset, i))
    if not any(u.kind for u in units):
        # No member is compressed or a tar: the file is itself a tar of documents.
        return ([], damage) if damage else ([Unit(name, base, 0, size, TAR, subset, 0)], None)
    return units, damage


def _check_end(f: BinaryIO, name: str, end: int, size: int, last: str | None) -> None:
    """``tarfile`` stops quietly at a damaged header: what follows the last member must be zeros."""
    after = f" after member {last}" if last else ""
    if end >= size:
        raise CorpusError(
            f"tar ends without its end-of-archive blocks{after}: truncated?", path=name
        )
    position = end
    while position < size:
        block = _pread(f, min(1 << 20, size - position), position)
        if block.strip(b"\0"):
            raise CorpusError(
                f"tar header at byte {end}{after} is damaged (the rest of the file is not read)",
                path=name,
                member=last,
            )
        position += len(block)


class Indexed(NamedTuple):
    """What ``index_inputs`` found."""

    units: list[Unit]
    skipped: list[CorpusError]
    """Files left out under ``on_error="skip"``: unreadable, not a corpus file, broken tar."""
    ignored: list[str]
    """Folder and pattern entries that are not corpus files."""


def index_inputs(
    paths: Sequence[str | os.PathLike[str]],
    *,
    on_error: str = "raise",
    storage: Storage | None = None,
) -> Indexed:
    """Index every file named by ``paths`` (files, folders, globs, URLs), in order.

    Args:
        paths: What to index: local paths, or fsspec URLs (``openwebtext.index.remote``).
        on_error: ``raise``: the first bad file is an error; ``skip`` or
            ``warn``: bad files are left out and listed in ``skipped``.
        storage: What URLs are read with (None: the process's default).

    Raises:
        CorpusError: a bad file (under ``raise``), the same file twice, or no
            member at all.
    """
    indexed = Indexed([], [], [])
    for local, group in itertools.groupby(paths, key=lambda p: not is_url(p)):
        if local:
            _index_local(list(group), on_error, indexed)
            continue
        from openwebtext.index.remote import index_url  # remote builds on this module's tar walk

        for url in group:  # s3://, https://, hf://…: listed and indexed remotely, cached
            try:
                indexed.units.extend(index_url(os.fspath(url), storage))
            except CorpusError as exc:
                if on_error == "raise":
                    raise
                indexed.skipped.append(exc)
    units, skipped, ignored = indexed
    if not units:
        why = f" ({len(skipped)} files skipped; first: {skipped[0]})" if skipped else ""
        raise CorpusError(
            f"no documents: the corpus has no members{why}",
            path=", ".join(os.fspath(p) for p in paths),
        )
    if ignored:
        shown = ", ".join(os.path.basename(p) for p in ignored[:10])
        more = f" and {len(ignored) - 10} more" if len(ignored) > 10 else ""
        files = (
            "file that is not a corpus file"
            if len(ignored) == 1
            else ("files that are not corpus files")
        )
        log.warning("left out %d %s: %s%s", len(ignored), files, shown, more)
    return indexed


def _index_local(paths: list[str | os.PathLike[str]], on_error: str, indexed: Indexed) -> None:
    """Index local paths, folders and globs into ``indexed`` (see ``index_inputs``)."""
    found = find_files(paths)
    if on_error == "raise" and found.problems:
        raise found.problems[0]  # before reading any file
    indexed.ignored.extend(found.ignored)
    for item in found.items:
        try:
            if isinstance(item, CorpusError):
                raise item
            before, damage = index_file_before_damage(item)
        except CorpusError as exc:
            if on_error == "raise":
                raise
            indexed.skipped.append(exc)
            continue
        if damage is not None and on_error == "raise":
            raise damage
        if damage is not None:
            note = f"{damage.message} (kept the {len(before)} members before it)"
            indexed.skipped.append(CorpusError(note, path=damage.path, member=damage.member))
        indexed.units.extend(before)


def index_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Unit]:
    """Index every file named by ``paths`` (files, folders, globs), in order; see
    ``index_inputs``."""
    return index_inputs(paths).units
