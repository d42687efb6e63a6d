"""Members of remote files, fetched by byte range, a few requests in flight.

Runs inside the workers (``read.Reader`` calls it for units whose path is a
URL). It knows byte spans only (``ByteSpan``: path, offset, size and a member name for
messages), not what a unit means. A worker knows the units queued for it (its ``prefetch``
tasks); it tells ``prefetch`` about their spans, and their bytes are fetched on a small
thread pool while it decompresses the current one, so latency is hidden rather than paid
per member. Spans next to each other both in plan order and in the file (e.g.
``owt index``, which reads in corpus order) are merged into one request of at
most ``MERGE_BYTES``. Memory is bounded by what is queued: the pool's prefetch
setting, times a member (or a merged request).

The thread pool and the filesystems are made on first use, in the process
that uses them (after the fork). Everything is read with the corpus's
``Storage`` (its options and member cache), given by the pool.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Protocol

from openwebtext.errors import CorruptMember
from openwebtext.source.fetching import fetch
from openwebtext.source.membercache import FOLDER, MemberCache
from openwebtext.source.settings import Storage, is_url, placed, resolve

__all__ = ["MAX_GAP", "MERGE_BYTES", "THREADS", "ByteSpan", "RangeReader", "Span"]

log = logging.getLogger("openwebtext")

#: Largest merged request (AWS advises 8-16 MB ranged requests).
MERGE_BYTES = 16 << 20
#: Largest gap between two members that still merges them (tar headers, padding).
MAX_GAP = 64 << 10
#: Requests in flight per worker.
THREADS = 4

_Key = tuple[str, int, int]


class ByteSpan(Protocol):
    """What the reader needs of a span of bytes: where it lies, and a name for messages
    (a ``records.ByteSpan`` is one)."""

    @property
    def path(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def member(self) -> str: ...


class Span(NamedTuple):
    """A span of bytes of one file: ``size`` bytes at ``offset``, named ``member``."""

    path: str
    offset: int
    size: int
    member: str


def _key(span: ByteSpan) -> _Key:
    return (span.path, span.offset, span.size)


class RangeReader:
    """Fetches spans' bytes by range; ``prefetch`` starts them early."""

    def __init__(
        self,
        threads: int = THREADS,
        cache: MemberCache | None = None,
        storage: Storage | None = None,
    ):
        self.threads = threads
        self.storage = resolve(storage)
        if cache is None and (settings := self.storage.cache) is not None:
            cache = MemberCache(Path(settings.root) / FOLDER, settings.cap)
        self.cache = cache
        self.from_cache = False
        """Whether the last ``read`` was served by the member cache (its copy intact)."""
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[_Key, tuple[Future[bytes], int]] = {}
        self.requests = 0
        self.bytes = 0

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="owt-fetch")
        return self._pool

    def _fetch(self, path: str, start: int, end: int, member: str) -> bytes:
        # A span past the end of the file as indexed (a tar header claiming more than the
        # file holds): only what the file holds is asked for, and the reader sees a member
        # cut short ("file is truncated"), as it would of a local file; past its end, nothing.
        info = self.storage.identity(path)
        if info is not None:
            end = min(end, info.size)
            if end <= start:
                return b""
        data = fetch(path, start, end, member, self.storage)
        self.requests += 1
        self.bytes += len(data)
        return data

    def prefetch(self, spans: Sequence[ByteSpan]) -> None:
        """Start fetching ``spans`` (in this order) that are remote and not started yet."""
        todo = [
            u
            for u in spans
            if is_url(u.path) and _key(u) not in self._pending and not self._cached(u)
        ]
        groups: list[list[ByteSpan]] = []
        for u in todo:
            last = groups[-1][-1] if groups else None
            if (
                last is not None
                and last.path == u.path
                and 0 <= u.offset - (last.offset + last.size) <= MAX_GAP
                and u.offset + u.size - groups[-1][0].offset <= MERGE_BYTES
            ):
                groups[-1].append(u)
            else:
                groups.append([u])
        for group in groups:
            start = group[0].offset
            end = group[-1].offset + group[-1].size
            first = group[0]
            future = self._executor().submit(self._fetch, first.path, start, end, first.member)
            for u in group:
                self._pending[_key(u)] = (future, u.offset - start)

    def read(self, span: ByteSpan) -> bytes:
        """The bytes of ``span`` (prefetched, or fetched now).

        Raises:
            Unreadable: the file is missing, access is refused, or the
                retries ran out; names the URL and the member.
        """
        key = self._cache_key(span)
        if key is not None and self.cache is not None:
            dropped = self.cache.dropped
            cached = self.cache.get(key, span.size)
            if cached is not None:
                self._pending.pop(_key(span), None)
                self.from_cache = True
                return cached
            if self.cache.dropped != dropped:
                log.warning(
                    "the member cache's copy of %s in %s was damaged (its checksum does not "
                    "match): dropped, and the member fetched again from the server",
                    span.member,
                    span.path,
                )
        self.from_cache = False
        pending = self._pending.pop(_key(span), None)
        if pending is None:
            data = self._fetch(span.path, span.offset, span.offset + span.size, span.member)
        else:
            future, at = pending
            try:
                data = future.result()
            except CorruptMember as exc:
                raise type(exc)(exc.message, exc.path, span.member) from None
            if at != 0 or len(data) != span.size:
                data = data[at : at + span.size]
        if key is not None and self.cache is not None and len(data) == span.size:
            self.cache.put(key, data)
        return data

    def _cache_key(self, span: ByteSpan) -> str | None:
        """The member's key in the cache; None without a cache or a known file identity."""
        if self.cache is None:
            return None
        info = self.storage.identity(span.path)
        if info is None or not info.identity:
            return None
        where = placed(span.path, self.storage.place)
        return self.cache.key(where, info.identity, span.offset, span.size)

    def _cached(self, span: ByteSpan) -> bool:
        key = self._cache_key(span)
        return key is not None and self.cache is not None and self.cache.contains(key)

    def close(self) -> None:
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
