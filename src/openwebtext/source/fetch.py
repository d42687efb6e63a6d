"""Byte ranges of remote files: ``fetch`` (exactly the bytes asked for, or an error) and
``RangeFile``, a read-only file over it for walking tar headers. The one module that knows
both fsspec and the Hub: ``hf://`` reads go to ``hub.hub_read`` (the signed CDN URL the Hub
redirects to), every other URL to its fsspec filesystem; both under ``with_retries``.
"""

from __future__ import annotations

from typing import Any

from openwebtext.errors import CorruptMember
from openwebtext.source.filesystems import filesystem
from openwebtext.source.hub import hub_read
from openwebtext.source.redact import redact
from openwebtext.source.retry import Fatal, ShortRead, with_retries
from openwebtext.source.settings import Storage, identity, protocol, real_url, resolve

__all__ = ["RangeFile", "fetch"]

#: Per protocol, what ``cat_file`` needs to fetch exactly the range asked. HfFileSystem's
#: ``cat_file`` reads through a buffered file whose default cache reads a block (5 MB)
#: past the range: several times a member's own bytes, for every member.
_RANGE_OPTIONS: dict[str, dict[str, Any]] = {"hf": {"cache_type": "none"}}


def fetch(
    url: str, start: int, end: int, member: str | None = None, storage: Storage | None = None
) -> bytes:
    """Bytes ``[start, end)`` of ``url``, read with ``storage``: exactly that many, or an error.

    Raises:
        CorruptMember: the file is missing, access is refused, it changed since
            it was indexed, or retries ran out; names the URL (redacted) and ``member``.
    """
    real = real_url(url, storage)
    fs = filesystem(real, storage)
    options = _RANGE_OPTIONS.get(protocol(real), {})

    def through_fs() -> bytes:
        data: bytes = fs.cat_file(real, start=start, end=end, **options)
        if len(data) != end - start:
            raise ShortRead(f"got {len(data)} of {end - start} bytes at {start}")
        return data

    call = through_fs
    if protocol(real) == "hf":
        store = resolve(storage)
        known = identity(url, store)
        call = lambda: hub_read(real, start, end, store, known, through_fs)  # noqa: E731

    try:
        return with_retries(call, f"GET bytes {start}-{end - 1}")
    except Fatal as exc:
        raise CorruptMember(f"cannot read: {exc.reason}", redact(url), member) from None


class RangeFile:
    """A read-only file over a remote one, fetching small windows by range.

    Made for walking tar headers (``tarfile`` reads a 512-byte header, then
    seeks past the member): each miss fetches ``window`` bytes, so a header and
    the first bytes of its member usually come in one request. Windows are
    kept, so reading a member's first bytes again costs nothing.
    """

    def __init__(self, url: str, size: int, window: int = 2048, storage: Storage | None = None):
        self.url = url
        self.storage = storage
        self.name = url
        self.size = size
        self.window = window
        self.position = 0
        self.requests = 0
        self._windows: dict[int, bytes] = {}

    def pread(self, n: int, offset: int) -> bytes:
        n = max(0, min(n, self.size - offset))
        if n == 0:
            return b""
        first = offset // self.window
        last = (offset + n - 1) // self.window
        missing = [k for k in range(first, last + 1) if k not in self._windows]
        if missing:
            start = missing[0] * self.window
            end = min(self.size, (missing[-1] + 1) * self.window)
            data = fetch(self.url, start, end, storage=self.storage)
            self.requests += 1
            for k in range(missing[0], missing[-1] + 1):
                at = k * self.window - start
                self._windows[k] = data[at : at + self.window]
        joined = b"".join(self._windows[k] for k in range(first, last + 1))
        at = offset - first * self.window
        return joined[at : at + n]

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self.position
        data = self.pread(n, self.position)
        self.position += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        self._windows.clear()
