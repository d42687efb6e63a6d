"""Index: find the units of work (inner compressed members) and where they lie.

Only outer tar headers and the first bytes of each member are read; nothing is
decompressed. A unit is one inner member: ``(path, member, offset, size, kind)``.

Accepted inputs (paths, folders or glob patterns):

- a plain outer tar whose regular members are compressed inner tars
  (``urlsf_subsetNN.tar``, or ``openwebtext.tar`` after ``xz -d``);
- a compressed inner member on its own (``urlsf_subset00-1_data.xz``);
- a plain tar of documents (an inner tar that was never compressed);
- a folder holding any of these (not recursive; names starting with ``.`` or
  ``_`` are ignored).
"""

from __future__ import annotations

import glob
import os
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from .errors import CorpusError, UnknownFormat
from .formats import MAGIC_BYTES, TAR, detect
from .storage import is_url

__all__ = ["Unit", "expand_paths", "index_file", "index_paths"]

_KNOWN = "a tar, or xz, gzip, bzip2 or zstd data"


class Unit(NamedTuple):
    """One unit of work: an inner member, located by byte offset in its file."""

    path: str
    """The file that holds the member."""
    member: str
    """The member's name inside ``path`` (the file's own name for a bare member)."""
    offset: int
    size: int
    kind: str
    """The member's format: ``xz``, ``gzip``, ``bzip2``, ``zstd`` or ``tar``."""
    subset: str
    """The file's name without its suffix, e.g. ``urlsf_subset00``."""
    member_index: int
    """Index of the member within its file (``i`` of the reference API)."""


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Turn paths, folders and glob patterns into a sorted list of files.

    Raises:
        CorpusError: a path that does not exist, or a folder or pattern that
            holds no file.
    """
    files: list[Path] = []
    for raw in paths:
        text = os.fspath(raw)
        path = Path(text)
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.is_file() and not p.name.startswith((".", "_"))
            )
            if not found:
                raise CorpusError("folder holds no corpus file", path=text)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        elif glob.has_magic(text):
            matches = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
            if not matches:
                raise CorpusError("pattern matches no file", path=text)
            files.extend(matches)
        else:
            raise CorpusError("no such file or folder", path=text)
    return files


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
    name = str(path)
    subset = path.name.split(".", 1)[0]
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            kind = detect(_head(f, 0))
            if kind is None:
                raise UnknownFormat(f"not {_KNOWN}", path=name)
            if kind != TAR:
                return [Unit(name, path.name, 0, size, kind, subset, 0)]
            return _index_outer_tar(f, name, size, subset, path.name)
    except OSError as exc:
        raise CorpusError(f"cannot read: {exc.strerror or exc}", path=name) from exc


def _index_outer_tar(f: BinaryIO, name: str, size: int, subset: str, base: str) -> list[Unit]:
    """Units of an outer tar. Damaged outer headers are errors: what follows them is lost.

    Problems with one member (cut short, empty, unknown format) become units
    that fail when read, so that the error policy decides (``Reader.read``).
    """
    members: list[tarfile.TarInfo] = []
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
            raise CorpusError(f"broken tar{where}: {exc}", path=name, member=last) from exc
    else:
        if not any(m.offset_data + m.size > size for m in members):
            _check_end(f, name, end, size, members[-1].name if members else None)
    units: list[Unit] = []
    for i, m in enumerate(members):
        head = _pread(f, min(MAGIC_BYTES, m.size), m.offset_data)
        kind = detect(head) or ""
        units.append(Unit(name, m.name, m.offset_data, m.size, kind, subset, i))
    if members and not any(u.kind for u in units):
        # No member is compressed or a tar: the file is itself a tar of documents.
        return [Unit(name, base, 0, size, TAR, subset, 0)]
    return units


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


def index_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Unit]:
    """Index every file named by ``paths`` (files, folders, globs), in order."""
    units: list[Unit] = []
    for raw in paths:
        if is_url(raw):  # s3://, https://, hf://…: listed and indexed remotely, cached
            from .remote import index_url

            units.extend(index_url(str(raw)))
            continue
        for path in expand_paths([raw]):
            units.extend(index_file(path))
    if not units:
        raise CorpusError(
            "no documents: the corpus has no members", path=", ".join(map(str, paths))
        )
    return units
