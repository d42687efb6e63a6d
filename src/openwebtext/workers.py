"""Workers: the processes that read units, and the consumer's side of them.

Nothing outside this module knows that processes exist. ``WorkerPool.run``
takes unit numbers in plan order and yields each unit's decompressed bytes and
document table, in that same order, whatever the number of workers.

How a unit travels:

- The consumer sends ``(seq, unit, slot)`` down a worker's task pipe. Tasks go
  out in plan order, at most ``prefetch`` per worker, and only while a slot is
  free, so memory is bounded by ``slots * slot_bytes`` whatever the consumer's
  speed.
- The worker reads the unit (``read.Reader``), copies the decompressed member
  into its slot of one shared anonymous mapping (made before the workers fork,
  so nothing is ever named or left behind), and sends back only the document
  table. A member larger than a slot travels inline through the pipe instead.
- The consumer decodes text straight out of the slot (no copy). It frees the
  slot when it asks for the next unit, or, with ``hold`` > 0, when it calls
  ``release``: then it may keep up to ``hold`` units (a shuffle block) while it
  hands their documents out, and the pool has that many more slots.

Failures are values: an error reading a unit comes back as the library's own
exception for that unit; a worker that exits, or sends nothing for
``timeout`` seconds while it holds work, becomes a ``WorkerError`` for the
units it held (after ``retries`` fresh attempts on a new worker).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import mmap
import multiprocessing as mp
import os
import selectors
import signal
import time
import traceback
from collections.abc import Generator, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from .errors import OWTError, WorkerError
from .index import Unit
from .read import Member, Reader, Split, encode_member
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["SLOT_BYTES", "InlinePool", "Loaded", "PoolOptions", "WorkerPool", "cpu_count"]

#: Largest decompressed member that travels through shared memory (larger: through the pipe).
SLOT_BYTES = 16 << 20


class PoolOptions(NamedTuple):
    workers: int
    prefetch: int
    slot_bytes: int
    timeout: float
    retries: int
    max_member_bytes: int
    max_document_bytes: int
    split: Split | None = None
    decode_errors: str | None = "strict"
    """How workers check UTF-8 (``strict``, ``replace``); None: not at all."""
    hold: int = 0
    """Units the consumer may keep after asking for the next one (see ``release``)."""
    tokenizer: str | None = None
    """Tokenize in the workers (``tokenizer.load_tokenizer`` spec): units carry ids, not text."""
    normalise: bool = False
    """With a tokenizer: tokenize ``read.nanogpt_text(text)`` (nanoGPT's loading script)."""


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
    """A unit-level failure (then the table is empty) or documents left out."""
    replace: int = 0
    """Kept documents that are invalid UTF-8: decode them with ``errors="replace"``."""
    ticket: int = -1
    """What to pass to ``release`` (with ``hold`` > 0)."""
    counts: list[int] | None = None
    """With a tokenizer: ids per document; ``data`` holds ids and ``offsets`` point at them."""


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
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the consumer decides when we stop
    _die_with_parent(parent)
    for conn in inherited:
        conn.close()
    reader = _reader(options)
    tokenizer = None if options.tokenizer is None else load_tokenizer(options.tokenizer)
    slot_bytes = options.slot_bytes
    queued: collections.deque[Any] = collections.deque()
    try:
        while True:
            try:
                task = _next_task(tasks, queued, reader, units)
            except EOFError:
                return
            if task is None:
                return
            seq, unit, slot = task
            try:
                member, payload, offsets, counts = _read(
                    reader, tokenizer, units[unit], options.normalise
                )
            except OWTError as exc:
                results.send(("err", seq, exc, traceback.format_exc()))
                continue
            except Exception as exc:  # a bug, not bad data: report it with its traceback
                error = WorkerError(f"unexpected {type(exc).__name__} reading {units[unit]}: {exc}")
                results.send(("err", seq, error, traceback.format_exc()))
                continue
            data: bytes | None = payload
            size = len(payload)
            if shared is not None and slot is not None and size <= slot_bytes:
                shared[slot * slot_bytes : slot * slot_bytes + size] = payload
                data = None
            results.send(
                (
                    "ok",
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


def _next_task(
    tasks: Connection, queued: collections.deque[Any], reader: Reader, units: Sequence[Unit]
) -> Any:
    """The next task; every task already sent is taken off the pipe and told to the reader.

    So a reader of remote files fetches the queued units while this one is
    decompressed (``Reader.prefetch``); local files ignore it.
    """
    if not queued:
        queued.append(tasks.recv())
    while queued[-1] is not None and tasks.poll():
        queued.append(tasks.recv())
    reader.prefetch([units[t[1]] for t in queued if t is not None])
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


def _reader(options: PoolOptions) -> Reader:
    return Reader(
        options.max_member_bytes,
        options.max_document_bytes,
        split=options.split,
        decode_errors=options.decode_errors,
    )


class _Worker:
    def __init__(self, number: int, process: Any, tasks: Connection, results: Connection):
        self.number = number
        self.process = process
        self.tasks = tasks
        self.results = results
        self.pid: int = process.pid
        self.inflight: list[int] = []
        self.last_heard = time.monotonic()


class WorkerPool:
    """Runs units on worker processes and hands them back in plan order."""

    def __init__(self, units: Sequence[Unit], options: PoolOptions):
        self.units = units
        self.options = options
        methods = mp.get_all_start_methods()
        self._ctx = mp.get_context("fork" if "fork" in methods else None)
        self._slots = max(2, options.workers * (options.prefetch + 1)) + options.hold
        self._shared: mmap.mmap | None = None
        if self._ctx.get_start_method() == "fork":
            self._shared = mmap.mmap(-1, self._slots * options.slot_bytes)
        self._workers: list[_Worker] = []
        self._next_number = 0
        self.closed = False
        # Tasks live across runs: seq -> (unit, slot, attempts).
        self._tasks: dict[int, tuple[int, int | None, int]] = {}
        self._done: dict[int, tuple[Any, ...]] = {}  # seq -> the worker's message
        self._retry: list[int] = []  # seqs to send again (their worker died)
        self._abandoned: set[int] = set()  # seqs of runs left early
        self._held: set[int] = set()  # seqs handed out and not yet released (hold > 0)
        self._free = list(range(self._slots - 1, -1, -1))
        self._seq_new = 0
        self._selector = selectors.DefaultSelector()  # worker pipes and exit sentinels

    # -- processes ---------------------------------------------------------

    def _spawn(self) -> _Worker:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        result_r, result_w = self._ctx.Pipe(duplex=False)
        inherited = [c for w in self._workers for c in (w.tasks, w.results)] + [task_w, result_r]
        process = self._ctx.Process(
            target=_worker_main,
            args=(self.units, task_r, result_w, self._shared, self.options, inherited, os.getpid()),
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
        """
        if self.closed:
            raise WorkerError("this worker pool is closed")
        while len(self._workers) < self.options.workers:
            # One at a time: each new worker must see (and close) its elders' pipes.
            self._add_worker()
        first = self._seq_new
        try:
            yield from self._run(iter(order))
        finally:
            self._abandoned.update(s for s in self._tasks if s >= first and s not in self._held)
            for seq in [s for s in self._done if s in self._abandoned]:
                self._finish(seq)

    def release(self, ticket: int) -> None:
        """Free the slot of a unit kept under ``hold`` (its ``data`` is then invalid)."""
        if ticket in self._held:
            self._held.discard(ticket)
            self._finish(ticket)

    def _finish(self, seq: int) -> None:
        """Forget a task and free its slot."""
        self._done.pop(seq, None)
        self._abandoned.discard(seq)
        _, slot, _ = self._tasks.pop(seq)
        if slot is not None:
            self._free.append(slot)

    def _dispatch(self, order: Iterator[int], exhausted: bool) -> bool:
        """Send work while workers have room and slots are free; True once ``order`` ran out."""
        while True:
            idle = min(self._workers, key=lambda w: len(w.inflight))
            if len(idle.inflight) >= self.options.prefetch:
                return exhausted
            if self._retry:
                seq = self._retry.pop(0)
            elif not exhausted and self._free:
                unit = next(order, None)
                if unit is None:
                    return True
                seq = self._seq_new
                self._seq_new += 1
                self._tasks[seq] = (unit, self._free.pop(), 0)
            else:
                return exhausted
            self._send(idle, seq)

    def _send(self, worker: _Worker, seq: int) -> None:
        unit, slot, _ = self._tasks[seq]
        if not worker.inflight:
            worker.last_heard = time.monotonic()
        worker.inflight.append(seq)
        with contextlib.suppress(BrokenPipeError, OSError):  # dead: seen by _wait
            worker.tasks.send((seq, unit, slot if self._shared is not None else None))

    def _run(self, order: Iterator[int]) -> Iterator[Loaded]:
        seq_out = self._seq_new
        exhausted = False
        while True:
            exhausted = self._dispatch(order, exhausted)
            if seq_out in self._done:
                message = self._done[seq_out]
                unit, slot, _ = self._tasks[seq_out]
                loaded = self._loaded(seq_out, unit, slot, message)
                if self.options.hold:
                    self._done.pop(seq_out)
                    self._held.add(seq_out)
                    yield loaded
                else:
                    try:
                        yield loaded
                    finally:
                        if isinstance(loaded.data, memoryview):
                            loaded.data.release()
                        self._finish(seq_out)
                seq_out += 1
                continue
            if exhausted and seq_out == self._seq_new:
                return
            if not self._free and not any(w.inflight for w in self._workers):
                # Every slot is kept by the consumer: nothing could ever arrive.
                raise WorkerError(
                    f"the consumer keeps all {self._slots} slots (hold={self.options.hold}): "
                    "release units before asking for more"
                )
            self._wait()

    def _loaded(
        self, seq: int, unit: int, slot: int | None, message: tuple[Any, ...]
    ) -> Loaded:
        if message[0] == "err":
            error: OWTError = message[2]
            return Loaded(unit, b"", [], [], [], [error], 0, seq)
        _, _, size, inline, names, offsets, sizes, dropped, replace, counts = message
        data: memoryview | bytes
        if inline is None and self._shared is not None and slot is not None:
            start = slot * self.options.slot_bytes
            data = memoryview(self._shared)[start : start + size]
        else:
            data = inline
        return Loaded(unit, data, names, offsets, sizes, list(dropped), replace, seq, counts)

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
                    message = w.results.recv()
                except (EOFError, OSError):
                    dead[w.number] = (w, "")
                    continue
                w.last_heard = time.monotonic()
                seq = message[1]
                w.inflight.remove(seq)
                self._done[seq] = message
                if seq in self._abandoned:
                    self._finish(seq)
            elif not w.results.poll():  # exited, and nothing left to read
                dead[w.number] = (w, "")
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
            unit, slot, attempts = self._tasks[seq]
            if seq in self._abandoned:
                self._finish(seq)
            elif position > 0:
                self._retry.append(seq)
            elif attempts < self.options.retries:
                self._tasks[seq] = (unit, slot, attempts + 1)
                self._send(fresh, seq)
            else:
                u = self.units[unit]
                error = WorkerError(
                    f"worker {w.number} (pid {w.pid}) {why} while reading {u.path}[{u.member}]",
                    path=u.path,
                    member=u.member,
                )
                self._done[seq] = ("err", seq, error, "")
        self._retry.sort()


class InlinePool:
    """``workers=0``: read units in the calling process (no processes, no shared memory).

    For debugging, and for callers that may not start processes (e.g. inside a
    daemonic ``torch.utils.data.DataLoader`` worker).
    """

    def __init__(self, units: Sequence[Unit], options: PoolOptions):
        self.units = units
        self.reader = _reader(options)
        self.tokenizer = None if options.tokenizer is None else load_tokenizer(options.tokenizer)
        self.normalise = options.normalise
        self.closed = False

    def run(self, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """Yield every unit of ``order``, in order."""
        for unit in order:
            try:
                member, payload, offsets, counts = _read(
                    self.reader, self.tokenizer, self.units[unit], self.normalise
                )
            except OWTError as exc:
                yield Loaded(unit, b"", [], [], [], [exc])
                continue
            except Exception as exc:  # a bug, or a tokenizer's own error: as a worker reports it
                u = self.units[unit]
                what = f"unexpected {type(exc).__name__} reading {u.path}[{u.member}]: {exc}"
                error = WorkerError(what, path=u.path, member=u.member)
                yield Loaded(unit, b"", [], [], [], [error])
                continue
            yield Loaded(
                unit,
                payload,
                member.names,
                offsets,
                member.sizes,
                list(member.dropped),
                member.replace,
                -1,
                counts,
            )

    def release(self, ticket: int) -> None:
        """Nothing to free: each unit's data is its own ``bytes``."""

    def close(self) -> None:
        self.closed = True
        self.reader.close()


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
