"""A unit's bytes as they lie in its file (``UnitBytes``): ``pread`` from a few files kept
open, or, for a URL, by range (``source.RangeReader``: prefetched, merged, cached).

What both readers (``read``'s text reader, ``tokens``' token reader) read before anything
is decompressed or decoded. Runs in the workers; the range reader is made on first use,
after the fork.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from openwebtext.codec import pread_all
from openwebtext.files import open_to_read
from openwebtext.records import Unit
from openwebtext.source import FileInfo, RangeReader, Storage, is_url, resolve, unchanged

__all__ = ["UnitBytes"]


class UnitBytes:
    """Reads units' bytes, keeping up to ``max_open`` local files open between them."""

    def __init__(self, max_open: int = 16, storage: Storage | None = None):
        self.max_open = max_open
        self.storage = storage
        """What URLs are read with (the corpus's; None: the process's default)."""
        self._files: dict[str, int] = {}
        self._remote: RangeReader | None = None  # made on first use: after the fork

    def read(self, unit: Unit) -> bytes:
        """The unit's bytes: fewer than ``unit.size`` when its file is cut short.

        Raises:
            OSError: the file cannot be opened or read.
        """
        if is_url(unit.path):  # by byte range (see ``source.ranges``)
            return self._ranges().read(unit)
        fd = self._fd(unit.path)  # (rewritten in place, or cut: not the corpus indexed)
        storage, st = resolve(self.storage), os.fstat(fd)
        unchanged(storage, unit.path, FileInfo.of_local(st))
        # (a header's size past the file's end: what is there, never a buffer of that size)
        data = pread_all(fd, max(0, min(unit.size, st.st_size - unit.offset)), unit.offset)
        # And after: a file rewritten during the read (its mtime moved) is not what was read.
        unchanged(storage, unit.path, FileInfo.of_local(os.fstat(fd)))
        return data

    def prefetch(self, units: Sequence[Unit]) -> None:
        """Start fetching the remote ones of ``units`` (read next, in this order)."""
        if any(is_url(u.path) for u in units):
            self._ranges().prefetch(units)

    def cached_note(self, unit: Unit) -> str:
        """Words for a member that fails to decode from the member cache: its copy there is
        intact (checksummed) and is what the server sent, so the remote file is bad."""
        if not (is_url(unit.path) and self._remote is not None and self._remote.from_cache):
            return ""
        return (
            " (read from the member cache, whose copy is intact and is what the server sent: "
            "the remote file itself is damaged)"
        )

    def close(self) -> None:
        """Close the files (each one out of the table before it is closed: a close cut by a
        signal's exception and made again never closes a number the program opened since)."""
        while self._files:
            os.close(self._files.popitem()[1])
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()

    def _fd(self, path: str) -> int:
        fd = self._files.get(path)
        if fd is None:
            if len(self._files) >= self.max_open:
                os.close(self._files.pop(next(iter(self._files))))
            fd = self._files[path] = open_to_read(path)
        return fd

    def _ranges(self) -> RangeReader:
        if self._remote is None:
            self._remote = RangeReader(storage=self.storage)
        return self._remote
