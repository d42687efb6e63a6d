"""The outer-tar walk: the units of an outer tar (one per regular member), read through
anything that reads bytes at an offset (``Readable``: a local file, or a remote one's
``source.RangeFile``), and the damage to its headers that ended the listing. Local and
remote indexing both call :func:`walk_outer_tar`.
"""

from __future__ import annotations

import tarfile
from typing import Protocol

from openwebtext.codec import pread_all
from openwebtext.errors import CorpusError, UnknownFormat
from openwebtext.formats import MAGIC_BYTES, TAR, detect, is_empty_tar, sure_kind
from openwebtext.records import Unit

__all__ = [
    "KNOWN",
    "LFS_POINTER",
    "LocalFile",
    "Readable",
    "file_kind",
    "json_hint",
    "placeholder",
    "walk_outer_tar",
]

#: The formats a corpus file (or member) may be in, as messages name them.
KNOWN = "a tar, or xz, gzip, bzip2 or zstd data"


class Readable(Protocol):
    """A file read by offset: what the walk needs."""

    @property
    def size(self) -> int: ...

    def pread(self, n: int, offset: int) -> bytes:
        """``n`` bytes at ``offset`` (fewer at the end of the file)."""
        ...


class LocalFile:
    """A local file read by offset (``Readable``)."""

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size

    def pread(self, n: int, offset: int) -> bytes:
        return pread_all(self.fd, n, offset)


class _Cursor:
    """``tarfile``'s view of a ``Readable``: a read-only file with a position."""

    def __init__(self, f: Readable, name: str):
        self.f = f
        self.name = name
        self.position = 0

    def read(self, size: int = -1, /) -> bytes:
        if size < 0:
            size = self.f.size - self.position
        data = self.f.pread(size, self.position)
        self.position += len(data)
        return data

    def write(self, b: bytes, /) -> int:
        raise OSError("read-only")

    def seek(self, pos: int, whence: int = 0, /) -> int:
        base = {0: 0, 1: self.position, 2: self.f.size}[whence]
        self.position = base + pos
        return self.position

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        pass


def file_kind(f: Readable, name: str) -> str:
    """What a corpus file of ``f.size`` bytes holds, from its first bytes: ``tar`` (an outer
    tar of members) or a bare member's format, for local and remote files alike.

    Raises:
        CorpusError: an empty file, or an empty tar.
        UnknownFormat: neither a tar nor a compressed member.
    """
    if f.size == 0:
        raise CorpusError("empty file", path=name)
    head = f.pread(MAGIC_BYTES, 0)
    kind = detect(head)
    if kind is None and is_empty_tar(head):
        raise CorpusError("empty tar: it holds no member", path=name)
    if kind is None:
        hint = placeholder(head) or _ids_hint(name) or json_hint(head)
        raise UnknownFormat(f"not {KNOWN}{hint}", path=name)
    return kind


def json_hint(head: bytes) -> str:
    """Words for a file or member whose first bytes (decompressed) look like JSON, to follow
    an error's message: JSON lines are known by their name only; "" for any other bytes."""
    if head.lstrip()[:1] not in (b"{", b"["):
        return ""
    return ("; its bytes look like JSON: JSON lines are read by their name (.jsonl or .ndjson, "
            "each optionally .gz or .zst; .json.gz; .json.zst)")  # fmt: skip


def _ids_hint(name: str) -> str:
    """Words for a file named as a file of token ids, which ``Corpus.open`` does not read."""
    if name.rsplit("/", 1)[-1].endswith((".bin", ".ds")):
        return (
            ": a file of token ids is opened with Corpus.open_tokens (a Mixture takes that "
            "Corpus); owt stream reads it given by name (.bin, .ds) with --tokenizer, not inside "
            "a folder or beside a text corpus"
        )
    return ""


#: What a Git LFS pointer file begins with: a clone without git-lfs leaves these in place
#: of the files (``train-00000-of-00001.parquet`` of 130 bytes).
LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def placeholder(head: bytes) -> str:
    """Words for a file that stands in for the corpus file it is named as (a Git LFS
    pointer), to follow an error's message; "" for any other bytes."""
    if head.startswith(LFS_POINTER):
        return (
            ": it is a Git LFS pointer, not the file itself (fetch the files: "
            "git lfs install && git lfs pull)"
        )
    return ""


def walk_outer_tar(
    f: Readable, name: str, subset: str, base: str
) -> tuple[list[Unit], CorpusError | None]:
    """Units of an outer tar, and the damage to its headers: what follows it is lost.

    Problems with one member (cut short, empty, unknown format) become units
    that fail when read, so that the error policy decides (``Reader.read``).
    ``name`` is the units' path, ``base`` the file's name (the unit of a tar of
    documents), ``subset`` what its units are counted under.
    """
    size = f.size
    members: list[tarfile.TarInfo] = []
    damage: CorpusError | None = None
    try:
        with tarfile.open(fileobj=_Cursor(f, name), mode="r:") as tar:
            for m in tar:
                if m.size < 0:  # (tarfile takes it, and would seek back: before the start, or
                    # onto a header it read, for ever)
                    raise tarfile.ReadError(f"a header says a negative size, {m.size}, for "
                                            f"{m.name!r}")  # fmt: skip
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
                _check_end(f, name, end, members[-1].name if members else None)
            except CorpusError as exc:
                damage = exc
    if not members:
        raise damage or CorpusError("tar holds no file (only folders, links or devices)", path=name)
    units: list[Unit] = []
    sure = 0  # (members whose format is beyond doubt)
    for i, m in enumerate(members):
        head = f.pread(min(MAGIC_BYTES, m.size), m.offset_data)
        tail = f.pread(4, m.offset_data + m.size - 4) if head[:4] == b"PAR1" else b""
        kind = detect(head) or ""
        units.append(Unit(name, m.name, m.offset_data, m.size, kind, subset, i))
        sure += bool(sure_kind(head, tail))
    if not sure and all(not u.kind or u.member.endswith(".txt") for u in units):
        # No member is compressed or a tar, but by text that begins as one may ("BZh", "PAR1
        # is"): the file is itself a tar of documents. (A member named otherwise whose magic
        # says a format is one, damaged past its magic: its read says so.)
        return ([], damage) if damage else ([Unit(name, base, 0, size, TAR, subset, 0)], None)
    return units, damage


def _check_end(f: Readable, name: str, end: int, last: str | None) -> None:
    """``tarfile`` stops quietly at a damaged header: what follows the last member must be zeros."""
    size = f.size
    after = f" after member {last}" if last else ""
    if end >= size:
        raise CorpusError(
            f"tar ends without its end-of-archive blocks{after}: truncated?", path=name
        )
    position = end
    while position < size:
        block = f.pread(min(1 << 20, size - position), position)
        if block.strip(b"\0"):
            raise CorpusError(
                f"tar header at byte {end}{after} is damaged (the rest of the file is not read)",
                path=name,
                member=last,
            )
        position += len(block)
