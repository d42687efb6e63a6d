"""The parent side: ``WorkerPool`` runs units on worker processes and hands them back in order.

It starts the workers (``child.worker_main``), sends requests in plan order while workers have
room and slots are free, waits on the workers' pipes and exit sentinels, reorders what arrives
(``tasks.Tasks``), and replaces a worker that died or hung, blaming only the unit it was reading.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import mmap
import multiprocessing as mp
import multiprocessing.process  # (its registry of children: a forked copy forgets ours)
import multiprocessing.util  # (its exit handler, registered first, runs after ours)
import os
import selectors
import signal
import threading
import time
import weakref
from collections.abc import Generator, Iterable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

from openwebtext.engine.child import worker_main
from openwebtext.engine.halting import (
    EXITING,
    check_children_waited,
    check_halt,
    end_worker,
    forking,
    halting_wait,
    held_signals,
    one_at_a_time,
    start_failed,
    stopped,
)
from openwebtext.engine.options import Lane, Lanes, PoolOptions
from openwebtext.engine.receive import recv_within
from openwebtext.engine.tasks import Done, Failed, Loaded, Request, Task, Tasks
from openwebtext.errors import WorkerError
from openwebtext.records import Unit
from openwebtext.source import Storage

__all__ = ["WorkerPool"]


class _Worker:
    def __init__(self, number: int, process: Any, tasks: Connection, results: Connection):
        self.number, self.process, self.tasks, self.results = number, process, tasks, results
        self.pid: int = process.pid
        self.inflight: list[int] = []
        """Sequence numbers sent to it and not answered yet, in the order it reads them."""
        self.last_heard = time.monotonic()
        """When it last answered, or was given work while it had none (its hang clock)."""


class _Run:
    """One lane's run (``WorkerPool.run_lane``): its units still to send, and the sequence
    numbers sent for it, in its order (what it hands out next is the first)."""

    __slots__ = ("exhausted", "lane", "offset", "order", "pending")

    def __init__(self, lane: int, offset: int, order: Iterator[int]) -> None:
        self.lane = lane
        self.offset = offset
        self.order = order
        self.exhausted = False
        self.pending: collections.deque[int] = collections.deque()


#: Shared memory reserved for the slots of a pool of several lanes at most (past it, units
#: travel through the pipes: a mixture of many parts keeps a shuffle block of each).
MAX_SHARED_BYTES = 8 << 30


#: The pools not collected: closed at exit (``_close_open``), before multiprocessing's own exit
#: handler joins their workers with no deadline (a worker SIGTERM cannot stop, a stopped one,
#: would hang the exit of a program whose traceback holds the pool; SIGKILL ends it).
_OPEN: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


def _close_open() -> None:
    EXITING.set()  # (a run it stops on a daemon thread waits for the end: ``stopped``)
    for pool in list(_OPEN):
        with contextlib.suppress(Exception):
            pool.close()


def _forked() -> None:
    """In a process forked from this one (a helper, a DataLoader's worker), the workers are
    the parent's: forget them in multiprocessing's registry, whose exit handler would
    terminate them there as its own (the parent's next read then failed, blaming a healthy
    member); a step a thread of the parent was in is not the fork's."""
    for pool in list(_OPEN):
        for w in pool._workers:
            multiprocessing.process._children.discard(w.process)  # type: ignore[attr-defined]
        pool._step = threading.RLock()


atexit.register(_close_open)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class _Closed(Exception):
    """The pool was closed during a step of a run (``WorkerPool._stepping`` ends the run)."""


class WorkerPool:
    """Runs units on worker processes and hands them back in plan order.

    Args:
        units: The units to read, with ``options`` and ``storage``; or
        lanes: several corpora, each with its own options (a mixture's parts): one run of
            each may go on at once (``run_lane``), their units sent to the same workers.
    """

    def __init__(
        self,
        units: Sequence[Unit],
        options: PoolOptions,
        storage: Storage | None = None,
        *,
        lanes: Sequence[Lane] | None = None,
    ):
        check_children_waited()
        self.lanes = Lanes([Lane(units, options, storage)] if lanes is None else lanes)
        self.units = self.lanes.units
        self.options = options
        self._ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else None)
        # More workers than units would only wait, each with its slots reserved.
        self._n_workers = max(1, min(options.workers, len(self.units)))
        # A lane's run may hold this many slots: what the workers read ahead, and a block.
        self.budget = max(2, self._n_workers * (options.prefetch + 1)) + options.hold
        self.slots = self.budget * len(self.lanes)
        self._shared: mmap.mmap | None = None
        size = self.slots * options.slot_bytes
        if self._ctx.get_start_method() == "fork" and (
            len(self.lanes) == 1 or size <= MAX_SHARED_BYTES
        ):
            self._shared = _reserve(self.slots, self._n_workers, options)
        self._workers: list[_Worker] = []
        self._next_number = 0
        self.closed = False
        self._closing = threading.Lock()  # (the exit's close and a stage thread's at once)
        self._step = threading.RLock()  # (a run's step, or a close: ``_stepping``)
        self._owner = os.getpid()  # (a forked copy's close leaves the workers to it)
        self.tasks = Tasks(self.slots)  # they live across runs
        self._runs: dict[int, _Run] = {}  # the run of each lane going on
        self._selector = selectors.DefaultSelector()  # worker pipes and exit sentinels
        self._wake = self._ctx.Pipe(duplex=False)  # (a close wakes a run's wait)
        self._selector.register(self._wake[0], selectors.EVENT_READ, None)
        _OPEN.add(self)

    # -- processes ---------------------------------------------------------

    @held_signals()  # (a handler's exception after a worker's wait, before it is noted: lost)
    def close(self) -> None:
        """Stop every worker now (they hold nothing worth finishing), one close at a time, a
        Ctrl-C or SIGTERM's handler held until it ends. Forked with the pool (a DataLoader
        worker), the workers are its parent's: only its pipes' copies are closed.
        A run on another thread (the exit's close under a reading thread) is woken, and ends
        (``_stepping``) before the workers and pipes go."""
        self.closed, ours = True, os.getpid() == self._owner
        if ours and not self._wake[1].closed:
            with contextlib.suppress(OSError):
                self._wake[1].send_bytes(b"")
        with one_at_a_time(self._closing, ours), one_at_a_time(self._step, ours):
            for w in self._workers if ours else ():
                if w.process.is_alive():
                    w.process.terminate()
            deadline = time.monotonic() + 2.0
            while self._workers:
                w = self._workers[0]
                end_worker(w.process, (w.tasks, w.results), ours, deadline)
                self._workers.pop(0)
            for conn in self._wake:
                conn.close()
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
        """Yield every unit of ``order``, in order (the first lane's; see ``run_lane``).

        The pool outlives a run: call ``run`` again for the next epoch. A run
        left early abandons its units in flight; their results are dropped
        when they arrive. ``close()`` stops the workers.

        Raises:
            WorkerError: the pool is closed, or a worker cannot be started.
        """
        return self.run_lane(0, order)

    def run_lane(self, lane: int, order: Iterable[int]) -> Generator[Loaded, None, None]:
        """``run`` of lane ``lane``'s units (numbered within the lane, as ``Loaded.unit`` is).

        Runs of different lanes go on at once, interleaved as their consumers ask: units are
        sent for each while the workers have room, the one asked for first, and a run holds
        at most ``budget`` slots, so no lane can starve another of them.
        """
        with self._stepping():
            if lane in self._runs:
                raise WorkerError(f"lane {lane} is already running")
            while len(self._workers) < self._n_workers:
                # One at a time: each new worker must see (and close) its elders' pipes.
                self._add_worker()
            run = self._runs[lane] = _Run(lane, self.lanes.offsets[lane], iter(order))
        try:
            yield from self._run(run)
        finally:
            del self._runs[lane]
            self.tasks.abandon(lane)

    def release(self, ticket: int) -> None:
        """Free the slot of a unit kept under ``hold`` (its ``data`` is then invalid).

        Without ``hold`` the pool frees each slot itself when the next unit is asked for.
        """
        if self.options.hold:
            self.tasks.release(ticket)

    def _dispatch(self, first: _Run) -> None:
        """Send work while workers have room and slots are free: tasks to send again, then
        the next units of ``first``, then of the other runs, in turn."""
        tasks = self.tasks
        while True:
            idle = min(self._workers, key=lambda w: len(w.inflight))
            if len(idle.inflight) >= self.options.prefetch:
                return
            task = tasks.resend()
            if task is None:
                task = self._new_task(first)
                if task is None:
                    return
            self._send(idle, task)

    def _new_task(self, first: _Run) -> Task | None:
        """A task for the next unit of ``first``, or else of another run with room."""
        tasks = self.tasks
        for run in (first, *self._runs.values()):
            while not run.exhausted and tasks.free and tasks.owned.get(run.lane, 0) < self.budget:
                unit = next(run.order, None)
                if unit is None:
                    run.exhausted = True
                    break
                task = tasks.new(run.offset + unit, run.lane)
                run.pending.append(task.seq)
                if len(self._runs) > 1:  # the others' turn next time
                    self._runs[run.lane] = self._runs.pop(run.lane)
                return task
        return None

    def _send(self, worker: _Worker, task: Task) -> None:
        if not worker.inflight:  # idle until now: its hang clock starts with this task
            worker.last_heard = time.monotonic()
        worker.inflight.append(task.seq)
        slot = task.slot if self._shared is not None else None
        with contextlib.suppress(BrokenPipeError, OSError):  # dead: seen by _wait
            worker.tasks.send(Request(task.seq, task.unit, slot))

    @contextlib.contextmanager
    def _stepping(self) -> Iterator[None]:
        """A step of a run (what it does between two units handed out), never at once with a
        close on another thread (the exit's close under a reading thread tore the pipes and
        processes out from under it, or the run spawned workers into the closed pool): the
        close wakes the step's wait and waits for it, and the run ends (``stopped``)."""
        try:
            with self._step:
                self._check_open()
                yield
        except _Closed:
            stopped()

    def _check_open(self) -> None:
        if self.closed:
            raise _Closed

    def _run(self, run: _Run) -> Iterator[Loaded]:
        while True:
            with self._stepping():
                loaded = self._next(run)
            if loaded is None:
                return
            if self.options.hold:
                yield loaded  # the consumer releases it
                continue
            try:
                yield loaded
            finally:
                if isinstance(loaded.data, memoryview):
                    loaded.data.release()
                self.tasks.release(loaded.ticket)

    def _next(self, run: _Run) -> Loaded | None:
        """The next unit of ``run``, once it arrived; None at the run's end."""
        tasks = self.tasks
        pending = run.pending
        while True:
            self._check_open()
            check_halt()  # (at each unit, ready or not; a wait looks again: ``halting_wait``)
            self._dispatch(run)
            result = tasks.ready(pending[0]) if pending else None
            if result is not None:
                task = tasks.hand_out(pending.popleft())
                return _loaded(task, result, run.offset, self._shared, self.options.slot_bytes)
            if run.exhausted and not pending:
                return None
            if not pending and not any(w.inflight for w in self._workers):
                # Every slot of this run is kept by the consumer: nothing could ever arrive.
                raise WorkerError(
                    f"the consumer keeps all {self.budget} slots (hold={self.options.hold}): "
                    "release units before asking for more"
                )
            self._wait()

    def _wait(self) -> None:
        """Wait for one message, a death or a hang, and record what happened."""
        busy = [w for w in self._workers if w.inflight]
        now = time.monotonic()
        deadline = min((w.last_heard + self.options.timeout for w in busy), default=now + 1.0)
        ready = self._selector.select(timeout=halting_wait(max(0.0, deadline - now)))
        self._check_open()  # (woken by a close: nothing is read or blamed)
        dead: dict[int, tuple[_Worker, str]] = {}
        for key, _ in ready:
            if key.data is None:  # (the close's wake)
                continue
            w, is_results = key.data
            if w.number in dead:
                continue
            if is_results:
                message = _received(w, self.options.timeout)
                if isinstance(message, str):
                    dead[w.number] = (w, message)
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
        # A signal's handler runs once the worker is noted (a Ctrl-C cut a start in two).
        with held_signals(), forking():
            elders = [c for w in self._workers for c in (w.tasks, w.results)] + [*self._wake]
            worker = _start(
                self._ctx, self._next_number, self.lanes, self._shared, self.options, elders
            )
            self._next_number += 1
            self._workers.append(worker)
            self._selector.register(worker.results, selectors.EVENT_READ, (worker, True))
            self._selector.register(worker.process.sentinel, selectors.EVENT_READ, (worker, False))
        return worker

    def _replace(self, w: _Worker, why: str) -> None:
        self._check_open()  # (the close stops the workers, and starts none)
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


def _reserve(slots: int, workers: int, options: PoolOptions) -> mmap.mmap:
    """The shared mapping of ``slots`` slots (made before the workers fork: nothing named)."""
    try:
        return mmap.mmap(-1, slots * options.slot_bytes)
    except OSError as exc:
        raise WorkerError(
            f"cannot reserve {slots * options.slot_bytes / 2**30:.1f} GiB of shared memory: "
            f"{slots} slots of {options.slot_bytes >> 20} MiB ({workers} workers with "
            f"{options.prefetch + 1} each, and {options.hold} the consumer holds, per "
            f"lane): {exc.strerror or exc}; use fewer workers, or none (workers=0, -j 0)"
        ) from exc


def _start(
    ctx: Any, number: int, lanes: Lanes, shared: mmap.mmap | None, options: PoolOptions,
    elders: list[Connection],
) -> _Worker:  # fmt: skip
    """Start worker ``number``; it closes ``elders``, the pipes it inherits and does not use."""
    task_r, task_w = ctx.Pipe(duplex=False)
    result_r, result_w = ctx.Pipe(duplex=False)
    main = threading.current_thread() is threading.main_thread()  # (how it dies with us)
    job = (lanes, task_r, result_w, shared, options, [*elders, task_w, result_r], os.getpid(), main)
    process = ctx.Process(target=worker_main, args=job, name=f"owt-worker-{number}", daemon=True)
    # SIGINT is blocked from the fork until the worker ignores it (``worker_main``): a Ctrl-C
    # to the process group in between would kill the new worker, not reach the consumer. A
    # signal that arrives meanwhile reaches this process once unblocked (and its Python
    # handler runs once the worker is noted: ``WorkerPool._add_worker``).
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    except BaseException as exc:
        if process.pid is not None:  # (started: what failed came after the fork)
            process.kill()
            process.join()
            process.close()
        for conn in (task_r, task_w, result_r, result_w):
            conn.close()
        if (failed := start_failed(exc)) is not None:
            raise failed from exc
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    task_r.close()
    result_w.close()
    return _Worker(number, process, task_w, result_r)


def _received(w: _Worker, timeout: float) -> Done | Failed | str:
    """The message ``w`` sent (read whole within ``timeout``: one stopped inside it, SIGSTOP,
    is a hang too, and is killed), or why it is dead ("": its pipe ended)."""
    try:
        message: Done | Failed = recv_within(w.results, timeout)
    except TimeoutError:  # (an OSError: first)
        w.process.kill()
        return f"stopped inside a message for {timeout:g} s"
    except (EOFError, OSError):
        return ""
    return message


def _loaded(
    task: Task, result: Done | Failed, offset: int, shared: mmap.mmap | None, slot_bytes: int
) -> Loaded:
    """What the consumer gets of a task's result: its slot's bytes as a view (or the bytes
    that came inline), the unit numbered within its lane."""
    unit = task.unit - offset
    if isinstance(result, Failed):
        return Loaded(unit, b"", [], [], [], [result.exception()], 0, task.seq)
    data: memoryview | bytes
    if result.data is None and shared is not None:
        start = task.slot * slot_bytes
        data = memoryview(shared)[start : start + result.size]
    else:
        assert result.data is not None
        data = result.data
    return Loaded(
        unit,
        data,
        result.names,
        result.offsets,
        result.sizes,
        result.dropped,
        result.replace,
        task.seq,
        result.counts,
    )
