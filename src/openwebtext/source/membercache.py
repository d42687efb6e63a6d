"""An optional local cache of remote members: a second epoch reads from disk.

One file per member, named by a hash of the file's URL, its identity (ETag or
the like, so a changed file never serves old bytes), the member's offset and
size. Writes go through ``files.atomic_file`` (a hidden temporary file renamed
into place; not fsync'd: a lost entry is only a miss), so a process killed
mid-write leaves at most a temporary file (``.NAME.XXXX.tmp``), never a short
member; those are removed once they are older than ``STALE_SECONDS`` and count
towards the cap meanwhile. A hit refreshes the file's mtime; when the cache
passes its cap, the files least recently used go first. Workers share the
folder, and one count of the bytes it holds (its ``total`` file, kept under the
folder's lock: a worker's own count missed the others' writes, and the cache
outgrew its cap); the folder is listed again when the count passes the cap.

Each entry starts with a checksum of the member's bytes (blake2b, 8 bytes), checked on every
read. An entry damaged on disk (other bytes of the same length) is never taken as data: it
is dropped (``dropped`` counts them) and the member fetched again; one of another length is
a miss, replaced by the next write.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import time
from pathlib import Path

from openwebtext.codec import read_file
from openwebtext.errors import OutputError
from openwebtext.files import atomic_file, folder_locked

__all__ = ["CHECKSUM_BYTES", "FOLDER", "STALE_SECONDS", "MemberCache", "parse_size"]

STALE_SECONDS = 600.0
CHECKSUM_BYTES = 8
#: The file in the cache's folder that says the bytes its entries hold (``MemberCache.put``).
TOTAL = "total"
#: The folder of ``cache_dir`` the member cache owns (``RangeReader``): the cache counts and
#: evicts its own files only, never another's that share ``cache_dir`` (a checkpoint, a corpus).
FOLDER = "owt-members"


def _checksum(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=CHECKSUM_BYTES).digest()


def parse_size(text: str) -> int:
    """``20G``, ``512M``, ``1.5T``, ``1000`` → bytes (powers of 1024).

    Raises:
        ValueError: not a size.
    """
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 20G, 512M)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _unreadable(path: Path, exc: OSError) -> None:
    """Remove the cache's own file ``path`` that could not be read for its permissions (a
    replacement would take its mode: ``files.atomic_file``), so that the next write is read."""
    if isinstance(exc, PermissionError):
        with contextlib.suppress(OSError):
            path.unlink()


class MemberCache:
    """Members on local disk under ``root``, at most ``cap`` bytes (None: no cap)."""

    def __init__(self, root: str | os.PathLike[str], cap: int | None = None):
        self.root = Path(root)
        self.cap = cap
        self.hits = 0
        self.misses = 0
        self.dropped = 0
        """Entries found damaged (their checksum did not match) and removed."""

    @staticmethod
    def key(url: str, identity: str, offset: int, size: int) -> str:
        return hashlib.sha256(f"{url}\0{identity}\0{offset}\0{size}".encode()).hexdigest()[:40]

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def contains(self, key: str) -> bool:
        return self._path(key).is_file()

    def get(self, key: str, size: int) -> bytes | None:
        """The cached bytes, or None (missing, or not ``size`` bytes long, or damaged: then
        the entry is removed and counted in ``dropped``)."""
        path = self._path(key)
        try:  # (a regular file's, at most the entry's size: a FIFO's read would wait forever)
            raw = read_file(path, CHECKSUM_BYTES + size)
        except OSError as exc:
            self.misses += 1
            _unreadable(path, exc)
            return None
        data = raw[CHECKSUM_BYTES:]
        if len(data) != size:  # never taken as data; the next put replaces it
            self.misses += 1
            return None
        if raw[:CHECKSUM_BYTES] != _checksum(data):
            self.misses += 1
            self.dropped += 1
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently *used*
        self.hits += 1
        return data

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` atomically, then evict past the cap (errors only cost the cache).
        An entry takes its checksum and its data (``CHECKSUM_BYTES`` more than the data): one
        that cannot fit the cap is not stored (else it evicted every other, then itself)."""
        held = CHECKSUM_BYTES + len(data)
        if self.cap is not None and held > self.cap:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(path, durable=False) as f:
                f.write(_checksum(data))
                f.write(data)
        except (OSError, OutputError):
            return
        # The bytes held, one count shared by every process writing here (a worker's own count
        # missed the others': the cache outgrew its cap; an uncapped one's writes count too),
        # kept under the folder's lock; counted again where none is said (a file system that
        # cannot lock: at every put).
        with folder_locked(self.root) as locked:
            if self.cap is None and not locked:  # (no cap to keep, no count to share)
                return
            said = self._said_total() if locked else None
            total = self._scan_total() if said is None else said + held
            if self.cap is not None and total > self.cap:
                total = self.evict()
            if locked:
                with (contextlib.suppress(OSError, OutputError),
                      atomic_file(self.root / TOTAL, durable=False) as f):  # fmt: skip
                    f.write(str(total).encode())

    def _said_total(self) -> int | None:
        """The bytes held, as the count shared by the processes writing here says (None: no
        count, or not one)."""
        try:
            text = read_file(self.root / TOTAL, 32)
        except OSError as exc:
            _unreadable(self.root / TOTAL, exc)
            return None
        return int(text) if text.isdigit() else None

    def _entries(self) -> list[tuple[float, int, Path, bool]]:
        """(mtime, size, path, is a temporary file) of the cache's own files: entries (and
        their temporaries) by their names, in folders by theirs; nothing else is counted, nor
        ever removed."""
        found = []
        with contextlib.suppress(OSError):
            for sub in self.root.iterdir():
                if len(sub.name) != 2 or not sub.is_dir():  # (``_path``: KEY[:2]/KEY)
                    continue
                for path in sub.iterdir():
                    name = path.name  # (an entry: KEY; ``atomic_file``'s: .KEY.XXXX.tmp)
                    temporary = name.startswith("." + sub.name) and name.endswith(".tmp")
                    if not (temporary or (name.startswith(sub.name) and "." not in name)):
                        continue
                    try:
                        st = path.lstat()
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):  # (a folder, a link in its place: not ours)
                        found.append((st.st_mtime, st.st_size, path, temporary))
        return found

    def _scan_total(self) -> int:
        return sum(size for _, size, _, _ in self._entries())

    def evict(self) -> int:
        """Remove stale temporary files, then the least recently used files past the cap.

        Returns the bytes the cache holds afterwards.
        """
        entries = self._entries()
        now = time.time()
        total = 0
        kept = []
        for mtime, size, path, tmp in entries:
            if tmp and now - mtime > STALE_SECONDS:
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            total += size
            if not tmp:
                kept.append((mtime, size, path))
        if self.cap is not None:
            kept.sort()
            for _, size, path in kept:
                if total <= self.cap:
                    break
                with contextlib.suppress(OSError):
                    path.unlink()
                total -= size
        return total
