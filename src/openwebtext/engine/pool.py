"""Pools: what a pool offers its consumer (``Pool``), and ``open_pool``, which makes one.

Nothing outside the engine knows that processes exist. ``open_pool`` gives a
``Pool``: ``run`` takes unit numbers in plan order and yields each unit's
decompressed bytes and document table (``Loaded``), in that same order,
whatever the number of workers. ``WorkerPool`` runs units on worker processes;
``InlinePool`` (``workers=0``) reads them in the calling process.

How a unit travels (the messages and the life of a task are in ``tasks``):

- The consumer sends a ``Request(seq, unit, slot)`` down a worker's task pipe.
  Requests go out in plan order, at most ``prefetch`` per worker, and only
  while a slot is free, so memory is bounded by ``slots * slot_bytes``
  whatever the consumer's speed.
- The worker reads the unit (``read.Reader``), copies the decompressed member
  into its slot of one shared anonymous mapping (made before the workers fork,
  so nothing is ever named or left behind), and sends back only the document
  table (``Done``). A member larger than a slot travels inline instead.
- The consumer decodes text straight out of the slot (no copy). It frees the
  slot when it asks for the next unit, or, with ``hold`` > 0, when it calls
  ``release``: then it may keep up to ``hold`` units (a shuffle block) while it
  hands their documents out, and the pool has that many more slots.

Failures are values: an error reading a unit comes back (``Failed``) as the
library's own exception for that unit, with the worker's traceback as its
cause; a worker that exits, or sends nothing for ``timeout`` seconds while it
holds work, becomes a ``WorkerError`` for the unit it was reading (after
``retries`` fresh attempts on a new worker); the units queued behind it are
sent again. A worker with nothing to do is never timed: the clock of a worker
starts when it is given work while idle, and restarts with every message.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
from collections.abc import Generator, Iterable, Sequence
from typing import Protocol

from openwebtext.engine.inline import InlinePool
from openwebtext.engine.options import Lane, PoolOptions
from openwebtext.engine.parent import WorkerPool
from openwebtext.engine.tasks import Loaded
from openwebtext.records import Unit
from openwebtext.source import Storage

__all__ = ["LanePool", "Pool", "cpu_count", "daemonic", "open_lanes", "open_pool"]

log = logging.getLogger("openwebtext")


class Pool(Protocol):
    """What a pool offers its consumer (``open_pool`` makes the right one)."""

    def run(self, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """Yield every unit of ``order``, in order (call again for the next epoch)."""
        ...

    def release(self, ticket: int) -> None:
        """Free the slot of a unit kept under ``hold``."""
        ...

    def close(self) -> None:
        """Stop every worker now."""
        ...

    def __enter__(self) -> Pool: ...

    def __exit__(self, *exc: object) -> None: ...


def open_pool(units: Sequence[Unit], options: PoolOptions, storage: Storage | None = None) -> Pool:
    """The pool for ``options``: worker processes, or the calling process with ``workers=0``.

    ``storage`` is what the units' URLs are read with (their corpus's; None: the
    process's default). Workers inherit it when forked, as they do the units.

    Raises:
        WorkerError: a worker process cannot be started (on the first ``run``).
    """
    if options.workers == 0 or daemonic():
        return InlinePool(units, options, storage)
    return WorkerPool(units, options, storage)


def open_lanes(lanes: Sequence[Lane], options: PoolOptions) -> LanePool:
    """One pool for several corpora (a mixture's parts): ``options`` says how many workers
    (or none), the prefetch, timeout, retries and hold; each lane how its units are read.
    ``LanePool.lane(i)`` is lane ``i`` as a ``Pool`` of its own."""
    if options.workers == 0 or daemonic():
        return LanePool(InlinePool((), options, lanes=lanes))
    return LanePool(WorkerPool((), options, lanes=lanes))


def daemonic() -> bool:
    """Whether this process is daemonic (a ``multiprocessing.Pool``'s worker, a DataLoader's),
    which may not start processes: its units are read in it (``workers=0``: the same
    documents in the same order), said once per process."""
    if multiprocessing.current_process().daemon:
        _say_daemonic()
        return True
    return False


@functools.cache
def _say_daemonic() -> None:
    log.warning("a daemonic process (a multiprocessing.Pool's worker) may not start processes: "
                "the workers' work is done in it, as with workers=0")  # fmt: skip


class LanePool:
    """A pool of several lanes: the workers are shared, each lane is read as a ``Pool``."""

    def __init__(self, pool: WorkerPool | InlinePool) -> None:
        self.pool = pool

    def lane(self, number: int) -> Pool:
        """Lane ``number`` as a pool: its runs go on beside the other lanes' (one each at a
        time); closing it leaves the workers to the others."""
        return _OneLane(self.pool, number)

    def close(self) -> None:
        """Stop every worker now."""
        self.pool.close()

    def __enter__(self) -> LanePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _OneLane:
    def __init__(self, pool: WorkerPool | InlinePool, number: int) -> None:
        self.pool = pool
        self.number = number

    def run(self, order: Iterable[int]) -> Generator[Loaded, None, None]:
        return self.pool.run_lane(self.number, order)

    def release(self, ticket: int) -> None:
        self.pool.release(ticket)

    def close(self) -> None:
        """Nothing: the workers are the ``LanePool``'s (a run left early abandons its own)."""

    def __enter__(self) -> _OneLane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
