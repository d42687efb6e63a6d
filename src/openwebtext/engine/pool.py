"""Workers: the processes that read units, and the consumer's side of them.

Nothing outside this module knows that processes exist. ``open_pool`` gives a
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

import collections
import contextlib
import ctypes
import mmap
import multiprocessing as mp
import os
import pickle
import selectors
import signal
import time
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, NamedTuple, Protocol

from openwebtext.engine.read import Member, Reader, Split, encode_member
from openwebtext.engine.tasks import Done, Failed, Request, Task, Tasks, failed, failure
from openwebtext.errors import OWTError, WorkerError
from openwebtext.options import (
    DECODE_ERRORS,
    MAX_DOCUMENT_BYTES,
    MAX_MEMBER_BYTES,
    PREFETCH,
    TIMEOUT,
    WORKERS,
)
from openwebtext.records import Unit
from openwebtext.source import Storage
from openwebtext.tokenizer import Tokenizer

__all__ = [
    "SLOT_BYTES",
    "InlinePool",
    "Loaded",
    "Pool",
    "PoolOptions",
    "WorkerPool",
    "cpu_count",
    "open_pool",
]

#: Largest decompressed member that travels through shared memory (larger: through the pipe).
SLOT_BYTES = 16 << 20

@dataclass(frozen=True, slots=True)
class PoolOptions:
    """How a pool reads units. The defaults are the loader's (``openwebtext.options``)."""

    workers: int = WORKERS
    """Worker processes; 0: read in the calling process (``InlinePool``)."""
    prefetch: int = PREFETCH
    """Units in flight per worker."""
    timeout: float = TIMEOUT
    """Seconds a worker holding work may stay silent before it counts as hung."""
    retries: int = 0
    """Fresh attempts at a unit whose worker died or hung while reading it."""
    max_member_bytes: int = MAX_MEMBER_BYTES
    max_document_bytes: int = MAX_DOCUMENT_BYTES
    split: Split | None = None
    decode_errors: str | None = DECODE_ERRORS
    """How workers check UTF-8 (``strict``, ``replace``); None: not at all."""
    hold: int = 0
    """Units the consumer may keep after asking for the next one (see ``release``)."""
    tokenizer: Tokenizer | None = None
    """Tokenize in the workers: units carry ids, not text. Resolved once by the caller; forked
    workers inherit it, and it pickles as its spec (a spawned worker loads it once)."""
    normalise: bool = False
    """With a tokenizer: tokenize ``read.nanogpt_text(text)`` (nanoGPT's loading script)."""
    slot_bytes: int = SLOT_BYTES
    """Bytes of one shared slot."""

    def __post_init__(self) -> None:
        for name, least in (
            ("workers", 0),
            ("prefetch", 1),
            ("retries", 0),
            ("hold", 0),
            ("slot_bytes", 1),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, not {value!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, not {self.timeout!r}")


class Loaded(NamedTuple):
    """One unit as the consumer sees it.

    ``data`` is valid until the next unit is asked for, or with ``hold`` > 0
    until ``release(ticket)``.
    """

    unit: int
    data: memoryview | bytes
    names: list[str]
    offsets: list[int]
    sizes: list[int]
    errors: Sequence[OWTError]
    """A unit-level failure (then the table is empty; its ``__cause__`` says where it was
    raised) or documents left out."""
    replace: int = 0
    """Kept documents that are invalid UTF-8: decode them with ``errors="replace"``."""
    ticket: int = -1
    """What to pass to ``release`` (with ``hold`` > 0)."""
    counts: list[int] | None = None
    """With a tokenizer: ids per document; ``data`` holds ids and ``offsets`` point at them."""


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
    if options.workers == 0:
        return InlinePool(units, options, storage)
    return WorkerPool(units, options, storage)


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this worker if its consumer dies, even mid-member (Linux).

    Without it, a worker busy with (or stuck in) a member outlives a consumer
    killed by SIGKILL or the OOM killer, holding the consumer's stdout open.
    Elsewhere a worker still exits at its next task, on EOF.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the consumer died before prctl took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1


def _worker_main(
    units: Sequence[Unit],
    tasks: Connection,
    results: Connection,
    shared: mmap.mmap | None,
    options: PoolOptions,
    inherited: list[Connection],
    parent: int,
    storage: Storage | None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the consumer decides when we stop
    # terminate() ends us at once, whatever SIGTERM handler the consumer's program has.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent(parent)
    for conn in inherited:
        conn.close()
    reader = _reader(options, storage)
    tokenizer = options.tokenizer
    slot_bytes = options.slot_bytes
    queued: collections.deque[Request | None] = collections.deque()
    try:
        while True:
            try:
                request = _next_task(tasks, queued, reader, units)
            except EOFError:
                return
            if request is None:
                return
            seq, unit, slot = request
            try:
                member, payload, offsets, counts = _read(
                    reader, tokenizer, units[unit], options.normalise
                )
            except Exception as exc:  # every failure is the unit's, sent as a value
                _send_failure(results, failed(seq, exc, units[unit]))
                continue
            data: bytes | None = payload
            size = len(payload)
            if shared is not None and slot is not None and size <= slot_bytes:
                shared[slot * slot_bytes : slot * slot_bytes + size] = payload
                data = None
            results.send(
                Done(
                    seq,
                    size,
                    data,
                    member.names,
                    offsets,
                    member.sizes,
                    member.dropped,
                    member.replace,
                    counts,
                )
            )
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        return
    finally:
        reader.close()


def _send_failure(results: Connection, message: Failed) -> None:
    """Send a failure; an error that cannot be pickled goes as a ``WorkerError`` saying so."""
    try:
        results.send(message)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        error = WorkerError(
            f"{message.error} (and its {type(message.error).__name__} cannot be sent: {exc})",
            path=getattr(message.error, "path", None),
            member=getattr(message.error, "member", None),
        )
        results.send(Failed(message.seq, error, message.traceback))


def _next_task(
    tasks: Connection,
    queued: collections.deque[Request | None],
    reader: Reader,
    units: Sequence[Unit],
) -> Request | None:
    """The next task; every task already sent is taken off the pipe and told to the reader.

    So a reader of remote files fetches the queued units while this one is
    decompressed (``Reader.prefetch``); local files ignore it.
    """
    if not queued:
        queued.append(tasks.recv())
    while queued[-1] is not None and tasks.poll():
        queued.append(tasks.recv())
    reader.prefetch([units[t.unit] for t in queued if t is not None])
    return queued.popleft()


def _read(
    reader: Reader, tokenizer: Tokenizer | None, unit: Unit, normalise: bool = False
) -> tuple[Member, bytes, list[int], list[int] | None]:
    """Read a unit: its member, the bytes for the consumer, their offsets and token counts."""
    member = reader.read(unit)
    if tokenizer is None:
        return member, member.data, member.offsets, None
    encoded = encode_member(member, tokenizer, normalise=normalise)
    return member, encoded.data, encoded.offsets, encoded.counts


def _reader(options: PoolOptions, storage: Storage | None) -> Reader:
    return Reader(
        options.max_member_bytes,
        options.max_document_bytes,
        split=options.split,
        decode_errors=options.decode_errors,
        storage=storage,
    )


class _Worker:
    def __init__(self, number: int, process: Any, tasks: Connection, results: Connection):
        self.number = number
        self.process = process
        self.tasks = tasks
        self.results = results
        self.pid: int = process.pid
        self.inflight: list[int] = []
        """Sequence numbers sent to it and not answered yet, in the order it reads them."""
        self.last_heard = time.monotonic()
        """When it last answered, or was given work while it had none (its hang clock)."""


class WorkerPool:
    """Runs units on worker processes and hands them back in plan order."""

    def __init__(self, units: Sequence[Unit], options: PoolOptions, storage: Storage | None = None):
        self.units = units
        self.options = options
        self.storage = storage
        methods = mp.get_all_start_methods()
        self._ctx = mp.get_context("fork" if "fork" in methods else None)
        # More workers than units would only wait, each with its slots reserved.
        self._n_workers = max(1, min(options.workers, len(units)))
        self.slots = max(2, self._n_workers * (options.prefetch + 1)) + options.hold
        self._shared: mmap.mmap | None = None
        if self._ctx.get_start_method() == "fork":
            size = self.slots * options.slot_bytes
            try:
                self._shared = mmap.mmap(-1, size)
            except OSError as exc:
                raise WorkerError(
                    f"cannot reserve {size / 2**30:.1f} GiB of shared memory for "
                    f"{self._n_workers} workers ({options.prefetch + 1} slots of "
                    f"{options.slot_bytes >> 20} MiB each): {exc.strerror or exc}; "
                    "use fewer workers"
                ) from exc
        self._workers: list[_Worker] = []
        self._next_number = 0
        self.closed = False
        self.tasks = Tasks(self.slots)  # they live across runs
        self._selector = selectors.DefaultSelector()  # worker pipes and exit sentinels

    # -- processes ---------------------------------------------------------

    def _spawn(self) -> _Worker:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        result_r, result_w = self._ctx.Pipe(duplex=False)
        inherited = [c for w in self._workers for c in (w.tasks, w.results)] + [task_w, result_r]
        process = self._ctx.Process(
            target=_worker_main,
            args=(
                self.units,
                task_r,
                result_w,
                self._shared,
                self.options,
                inherited,
                os.getpid(),
                self.storage,
            ),
            name=f"owt-worker-{self._next_number}",
            daemon=True,
        )
        try:
            process.start()
        except OSError as exc:
            for conn in (task_r, task_w, result_r, result_w):
                conn.close()
            raise WorkerError(f"cannot start a worker process: {exc}") from exc
        task_r.close()
        result_w.close()
        worker = _Worker(self._next_number, process, task_w, result_r)
        self._next_number += 1
        return worker

    def close(self) -> None:
        """Stop every worker now (they hold nothing worth finishing)."""
        if self.closed:
            return
        self.closed = True
        for w in self._workers:
            if w.process.is_alive():
                w.process.terminate()
        deadline = time.monotonic() + 2.0
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.tasks.close()
            w.results.close()
            w.process.close()
        self._workers.clear()
        self._selector.close()
        if self._shared is not None:
            # A view still held by the consumer keeps the mapping until it is dropped.
            with contextlib.suppress(BufferError):
                self._shared.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the run -----------------------------------------------------------

    def run(self, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """Yield every unit of ``order``, in order.

        The pool outlives a run: call ``run`` again for the next epoch. A run
        left early abandons its units in flight; their results are dropped
        when they arrive. ``close()`` stops the workers.

        Raises:
            WorkerError: the pool is closed, or a worker cannot be started.
        """
        if self.closed:
            raise WorkerError("this worker pool is closed")
        while len(self._workers) < self._n_workers:
            # One at a time: each new worker must see (and close) its elders' pipes.
            self._add_worker()
        try:
            yield from self._run(iter(order))
        finally:
            self.tasks.abandon()

    def release(self, ticket: int) -> None:
        """Free the slot of a unit kept under ``hold`` (its ``data`` is then invalid).

        Without ``hold`` the pool frees each slot itself when the next unit is asked for.
        """
        if self.options.hold:
            self.tasks.release(ticket)

    def _dispatch(self, order: Iterator[int], exhausted: bool) -> bool:
        """Send work while workers have room and slots are free; True once ``order`` ran out."""
        tasks = self.tasks
        while True:
            idle = min(self._workers, key=lambda w: len(w.inflight))
            if len(idle.inflight) >= self.options.prefetch:
                return exhausted
            task = tasks.resend()
            if task is None:
                if exhausted or not tasks.free:
                    return exhausted
                unit = next(order, None)
                if unit is None:
                    return True
                task = tasks.new(unit)
            self._send(idle, task)

    def _send(self, worker: _Worker, task: Task) -> None:
        if not worker.inflight:  # idle until now: its hang clock starts with this task
            worker.last_heard = time.monotonic()
        worker.inflight.append(task.seq)
        slot = task.slot if self._shared is not None else None
        with contextlib.suppress(BrokenPipeError, OSError):  # dead: seen by _wait
            worker.tasks.send(Request(task.seq, task.unit, slot))

    def _run(self, order: Iterator[int]) -> Iterator[Loaded]:
        tasks = self.tasks
        seq = tasks.next_seq
        exhausted = False
        while True:
            exhausted = self._dispatch(order, exhausted)
            result = tasks.ready(seq)
            if result is not None:
                task = tasks.hand_out(seq)
                loaded = self._loaded(task, result)
                seq += 1
                if self.options.hold:
                    yield loaded  # the consumer releases it
                    continue
                try:
                    yield loaded
                finally:
                    if isinstance(loaded.data, memoryview):
                        loaded.data.release()
                    tasks.release(task.seq)
                continue
            if exhausted and seq == tasks.next_seq:
                return
            if not tasks.free and not any(w.inflight for w in self._workers):
                # Every slot is kept by the consumer: nothing could ever arrive.
                raise WorkerError(
                    f"the consumer keeps all {self.slots} slots (hold={self.options.hold}): "
                    "release units before asking for more"
                )
            self._wait()

    def _loaded(self, task: Task, result: Done | Failed) -> Loaded:
        if isinstance(result, Failed):
            return Loaded(task.unit, b"", [], [], [], [result.exception()], 0, task.seq)
        data: memoryview | bytes
        if result.data is None and self._shared is not None:
            start = task.slot * self.options.slot_bytes
            data = memoryview(self._shared)[start : start + result.size]
        else:
            assert result.data is not None
            data = result.data
        return Loaded(
            task.unit,
            data,
            result.names,
            result.offsets,
            result.sizes,
            result.dropped,
            result.replace,
            task.seq,
            result.counts,
        )

    def _wait(self) -> None:
        """Wait for one message, a death or a hang, and record what happened."""
        busy = [w for w in self._workers if w.inflight]
        now = time.monotonic()
        deadline = min((w.last_heard + self.options.timeout for w in busy), default=now + 1.0)
        ready = self._selector.select(timeout=max(0.0, deadline - now))
        dead: dict[int, tuple[_Worker, str]] = {}
        for key, _ in ready:
            w, is_results = key.data
            if w.number in dead:
                continue
            if is_results:
                try:
                    message: Done | Failed = w.results.recv()
                except (EOFError, OSError):
                    dead[w.number] = (w, "")
                    continue
                w.last_heard = time.monotonic()
                w.inflight.remove(message.seq)
                self.tasks.arrived(message)
            elif not w.results.poll():  # exited, and nothing left to read
                dead[w.number] = (w, "")
        # Only after reading what is ready: a consumer that paused is no reason to blame a
        # worker whose answers were waiting for it.
        now = time.monotonic()
        for w in busy:
            if w.number not in dead and w.inflight and now - w.last_heard >= self.options.timeout:
                w.process.kill()
                dead[w.number] = (w, f"sent nothing for {self.options.timeout:g} s")
        for w, why in dead.values():
            self._replace(w, why)

    def _add_worker(self) -> _Worker:
        worker = self._spawn()
        self._workers.append(worker)
        self._selector.register(worker.results, selectors.EVENT_READ, (worker, True))
        self._selector.register(worker.process.sentinel, selectors.EVENT_READ, (worker, False))
        return worker

    def _replace(self, w: _Worker, why: str) -> None:
        self._selector.unregister(w.results)
        self._selector.unregister(w.process.sentinel)
        w.process.join(1.0)  # it closed its pipe: it is exiting, or about to
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        why = why or f"exited with code {w.process.exitcode}"
        w.tasks.close()
        w.results.close()
        w.process.close()
        self._workers.remove(w)
        fresh = self._add_worker()
        # A worker reads its tasks in order: only the first was being read when
        # it failed; the rest had not started and go back without blame. The
        # blamed one gets its retry on the fresh worker, first in its queue.
        for position, seq in enumerate(w.inflight):
            u = self.units[self.tasks[seq].unit]
            error = WorkerError(
                f"worker {w.number} (pid {w.pid}) {why} while reading {u.path}[{u.member}]",
                path=u.path,
                member=u.member,
            )
            again = self.tasks.lost(
                seq, blamed=position == 0, retries=self.options.retries, error=error
            )
            if again is not None:
                self._send(fresh, again)


class InlinePool:
    """``workers=0``: read units in the calling process (no processes, no shared memory).

    For debugging, and for callers that may not start processes (e.g. inside a
    daemonic ``torch.utils.data.DataLoader`` worker). Its errors are the ones a
    worker would send; their cause is the real exception, traceback and all.
    """

    def __init__(self, units: Sequence[Unit], options: PoolOptions, storage: Storage | None = None):
        self.units = units
        self.options = options
        self.reader = _reader(options, storage)
        self.tokenizer = options.tokenizer
        self.normalise = options.normalise
        self.closed = False

    def run(self, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """Yield every unit of ``order``, in order."""
        for unit in order:
            try:
                member, payload, offsets, counts = _read(
                    self.reader, self.tokenizer, self.units[unit], self.normalise
                )
            except Exception as exc:  # as a worker reports it
                error = failure(exc, self.units[unit])
                if error is not exc:
                    error.__cause__ = exc
                yield Loaded(unit, b"", [], [], [], [error])
                continue
            yield Loaded(
                unit,
                payload,
                member.names,
                offsets,
                member.sizes,
                member.dropped,
                member.replace,
                -1,
                counts,
            )

    def release(self, ticket: int) -> None:
        """Nothing to free: each unit's data is its own ``bytes``."""

    def close(self) -> None:
        self.closed = True
        self.reader.close()

    def __enter__(self) -> InlinePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
