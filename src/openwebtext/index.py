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

import errno
import glob
import logging
import os
import re
import stat
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple

from .errors import CorpusError, UnknownFormat
from .formats import MAGIC_BYTES, TAR, detect

__all__ = [
    "Found",
    "Indexed",
    "Unit",
    "expand_paths",
    "file_version",
    "find_files",
    "index_file",
    "index_inputs",
    "index_paths",
]

log = logging.getLogger("openwebtext")

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


class Found(NamedTuple):
    """What paths, folders and patterns name (``find_files``)."""

    items: list[Path | CorpusError]
    """In order: corpus files, and paths that name something unreadable (a dangling
    symlink, a FIFO, a loop) as the error that says so."""
    ignored: list[str]
    """Entries of folders and patterns that are not corpus files (README.md, checksums)."""

    @property
    def files(self) -> list[Path]:
        return [item for item in self.items if isinstance(item, Path)]

    @property
    def problems(self) -> list[CorpusError]:
        return [item for item in self.items if isinstance(item, CorpusError)]


#: File names of the OpenWebText release: kept in a folder even when their bytes are damaged.
_OPENWEBTEXT_NAME = re.compile(r"^(urlsf_subset\d+.*\.tar|.*_data\.xz|openwebtext\.tar.*)$")

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _unreadable(path: str, lstat_ok: bool) -> CorpusError:
    """Why ``path`` (which ``os.stat`` refused) cannot be read."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return CorpusError("symlink loop: the link never reaches a file", path=path)
        if exc.errno == errno.ENOENT and lstat_ok:
            return CorpusError(f"dangling symlink to {os.readlink(path)}", path=path)
        if exc.errno == errno.ENOENT:
            return CorpusError("no such file or folder", path=path)
        return CorpusError(f"cannot read: {exc.strerror or exc}", path=path)
    return CorpusError("cannot read", path=path)  # pragma: no cover - it went away and back


def _classify(path: str) -> tuple[str, os.stat_result | None, str]:
    """``("file" | "folder" | "other" | "bad", stat, why)`` for one path, following links."""
    try:
        st = os.stat(path)
    except OSError:
        return "bad", None, ""
    if stat.S_ISDIR(st.st_mode):
        return "folder", st, ""
    if stat.S_ISREG(st.st_mode):
        return "file", st, ""
    what = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    return "other", st, what


def _is_corpus_file(path: str) -> bool | CorpusError:
    """Whether a file found in a folder or pattern belongs to the corpus: its magic bytes
    (as members are recognised) or an OpenWebText name. An unreadable one is an error."""
    if _OPENWEBTEXT_NAME.match(os.path.basename(path)):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(MAGIC_BYTES)
    except OSError as exc:
        return CorpusError(f"cannot read: {exc.strerror or exc}", path=path)
    return detect(head) is not None or _is_empty_tar(head)


def find_files(paths: Iterable[str | os.PathLike[str]]) -> Found:
    """Turn paths, folders and glob patterns into the corpus files they name.

    A folder (not recursive; names starting with ``.`` or ``_`` are left out)
    or a pattern keeps the files that are corpus files by their magic bytes or
    their OpenWebText names; the others are ``ignored``. A path named
    explicitly is kept whatever it holds (indexing it says what is wrong).
    Unreadable paths are ``problems``. The same file named twice, by any
    spelling, is refused: its documents would silently count twice.

    Raises:
        CorpusError: a folder or pattern that names no file, or a file named twice.
    """
    found = Found([], [])
    seen: dict[tuple[int, int], str] = {}

    def keep(path: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise CorpusError(
                f"the same file is given twice (also as {seen[key]}): its documents would be "
                "read twice; name each file once",
                path=path,
            )
        seen[key] = path
        found.items.append(Path(path))

    def entries(source: str, listed: list[str]) -> None:
        before = len(found.items)
        for path in listed:
            kind, st, _ = _classify(path)
            if kind == "bad":
                found.items.append(_unreadable(path, os.path.lexists(path)))
            elif kind == "file" and st is not None:
                corpus_file = _is_corpus_file(path)
                if isinstance(corpus_file, CorpusError):
                    found.items.append(corpus_file)
                elif corpus_file:
                    keep(path, st)
                else:
                    found.ignored.append(path)
            elif kind == "other":
                found.ignored.append(path)
        if len(found.items) == before:
            raise CorpusError("holds no corpus file", path=source)

    for raw in paths:
        text = os.fspath(raw)
        kind, st, what = _classify(text)
        if kind == "folder":
            listed = sorted(
                os.path.join(text, name)
                for name in os.listdir(text)
                if not name.startswith((".", "_"))
            )
            entries(text, [p for p in listed if not os.path.isdir(p)])
        elif kind == "file" and st is not None:
            keep(text, st)
        elif kind == "other":
            found.items.append(CorpusError(f"is {what}, not a file", path=text))
        elif glob.has_magic(text):
            matches = sorted(glob.glob(text))
            if not matches:
                raise CorpusError("pattern matches no file", path=text)
            entries(text, [p for p in matches if not os.path.isdir(p)])
        else:
            found.items.append(_unreadable(text, os.path.lexists(text)))
    return found


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The corpus files named by paths, folders and glob patterns (see ``find_files``).

    Raises:
        CorpusError: an unreadable path, or one that holds no corpus file.
    """
    found = find_files(paths)
    if found.problems:
        raise found.problems[0]
    return found.files


def file_version(path: str) -> str:
    """What changes when the file changes: its size and modification time.

    The counts cache is keyed on it. A remote file would give its ETag or
    generation here instead.
    """
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}"


def _head(f: BinaryIO, offset: int) -> bytes:
    return os.pread(f.fileno(), MAGIC_BYTES, offset)


def _is_empty_tar(head: bytes) -> bool:
    """A tar with no member is only its end-of-archive zero blocks."""
    return len(head) == MAGIC_BYTES and not head.strip(b"\0")


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
            if kind is None and _is_empty_tar(head):
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
        head = os.pread(f.fileno(), min(MAGIC_BYTES, m.size), m.offset_data)
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
        block = os.pread(f.fileno(), min(1 << 20, size - position), position)
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


def index_inputs(paths: Sequence[str | os.PathLike[str]], *, on_error: str = "raise") -> Indexed:
    """Index every file named by ``paths`` (files, folders, globs), in order.

    Args:
        paths: What to index.
        on_error: ``raise``: the first bad file is an error; ``skip`` or
            ``warn``: bad files are left out and listed in ``skipped``.

    Raises:
        CorpusError: a bad file (under ``raise``), the same file twice, or no
            member at all.
    """
    found = find_files(paths)
    if on_error == "raise" and found.problems:
        raise found.problems[0]  # before reading any file
    skipped: list[CorpusError] = []
    units: list[Unit] = []
    for item in found.items:
        try:
            if isinstance(item, CorpusError):
                raise item
            before, damage = index_file_before_damage(item)
        except CorpusError as exc:
            if on_error == "raise":
                raise
            skipped.append(exc)
            continue
        if damage is not None and on_error == "raise":
            raise damage
        if damage is not None:
            note = f"{damage.message} (kept the {len(before)} members before it)"
            skipped.append(CorpusError(note, path=damage.path, member=damage.member))
        units.extend(before)
    if not units:
        why = f" ({len(skipped)} files skipped; first: {skipped[0]})" if skipped else ""
        raise CorpusError(
            f"no documents: the corpus has no members{why}",
            path=", ".join(os.fspath(p) for p in paths),
        )
    if found.ignored:
        shown = ", ".join(os.path.basename(p) for p in found.ignored[:10])
        more = f" and {len(found.ignored) - 10} more" if len(found.ignored) > 10 else ""
        files = (
            "file that is not a corpus file"
            if len(found.ignored) == 1
            else ("files that are not corpus files")
        )
        log.warning("left out %d %s: %s%s", len(found.ignored), files, shown, more)
    return Indexed(units, skipped, found.ignored)


def index_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Unit]:
    """Index every file named by ``paths`` (files, folders, globs), in order; see
    ``index_inputs``."""
    return index_inputs(paths).units
