"""Members of remote files, fetched by byte range, a few requests in flight.

Runs inside the workers (``read.Reader`` calls it for units whose path is a
URL). A worker knows the units queued for it (its ``prefetch`` tasks); it tells
``prefetch`` about them, and their bytes are fetched on a small thread pool
while it decompresses the current one, so latency is hidden rather than paid
per member. Units next to each other both in plan order and in the file (e.g.
``owt index``, which reads in corpus order) are merged into one request of at
most ``MERGE_BYTES``. Memory is bounded by what is queued: the pool's prefetch
setting, times a member (or a merged request).

The thread pool and the filesystems are made on first use, in the process
that uses them (after the fork). Everything is read with the corpus's
``storage.Storage`` (its options and member cache), given by the pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from openwebtext.errors import CorruptMember
from openwebtext.records import Unit
from openwebtext.source.membercache import MemberCache
from openwebtext.source.storage import Storage, fetch, identity, is_url, placed, resolve

__all__ = ["MAX_GAP", "MERGE_BYTES", "RangeReader"]

#: Largest merged request (AWS advises 8-16 MB ranged requests).
MERGE_BYTES = 16 << 20
#: Largest gap between two members that still merges them (tar headers, padding).
MAX_GAP = 64 << 10
#: Requests in flight per worker.
THREADS = 4

_Key = tuple[str, int, int]


def _key(unit: Unit) -> _Key:
    return (unit.path, unit.offset, unit.size)


class RangeReader:
    """Fetches units' bytes by range; ``prefetch`` starts them early."""

    def __init__(
        self,
        threads: int = THREADS,
        cache: MemberCache | None = None,
        storage: Storage | None = None,
    ):
        self.threads = threads
        self.storage = resolve(storage)
        if cache is None and (settings := self.storage.cache) is not None:
            cache = MemberCache(settings.root, settings.cap)
        self.cache = cache
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[_Key, tuple[Future[bytes], int]] = {}
        self.requests = 0
        self.bytes = 0

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="owt-fetch")
        return self._pool

    def _fetch(self, path: str, start: int, end: int, member: str) -> bytes:
        data = fetch(path, start, end, member, self.storage)
        self.requests += 1
        self.bytes += len(data)
        return data

    def prefetch(self, units: Sequence[Unit]) -> None:
        """Start fetching ``units`` (in this order) that are remote and not started yet."""
        todo = [
            u
            for u in units
            if is_url(u.path) and _key(u) not in self._pending and not self._cached(u)
        ]
        groups: list[list[Unit]] = []
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

    def read(self, unit: Unit) -> bytes:
        """The bytes of ``unit`` (prefetched, or fetched now).

        Raises:
            CorruptMember: the file is missing, access is refused, or the
                retries ran out; names the URL and the member.
        """
        key = self._cache_key(unit)
        if key is not None and self.cache is not None:
            cached = self.cache.get(key, unit.size)
            if cached is not None:
                self._pending.pop(_key(unit), None)
                return cached
        pending = self._pending.pop(_key(unit), None)
        if pending is None:
            data = self._fetch(unit.path, unit.offset, unit.offset + unit.size, unit.member)
        else:
            future, at = pending
            try:
                data = future.result()
            except CorruptMember as exc:
                raise CorruptMember(exc.message, exc.path, unit.member) from None
            if at != 0 or len(data) != unit.size:
                data = data[at : at + unit.size]
        if key is not None and self.cache is not None:
            self.cache.put(key, data)
        return data

    def _cache_key(self, unit: Unit) -> str | None:
        """The member's key in the cache; None without a cache or a known file identity."""
        if self.cache is None:
            return None
        info = identity(unit.path, self.storage)
        if info is None or not info.identity:
            return None
        where = placed(unit.path, self.storage.place)
        return self.cache.key(where, info.identity, unit.offset, unit.size)

    def _cached(self, unit: Unit) -> bool:
        key = self._cache_key(unit)
        return key is not None and self.cache is not None and self.cache.contains(key)

    def close(self) -> None:
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
