"""What ends a pool's reading from outside it: another thread (``Halt``), a close at the
program's exit (``stopped``), a signal (held back while a worker starts: ``held_signals``).

A thread that reads a pool for someone else (``ahead``'s, ``Loader.batches(...).start()``'s)
may sit in the pool's wait for a worker that is stuck (a read that never returns) until hang
detection fires (``timeout``, 60 s by default). On the main thread a Ctrl-C ends that wait at
once; a signal never reaches another thread, so the thread that closes the stage sets the
reading thread's ``Halt`` instead. Every wait of a pool on a thread that watches a halt
(``Halt.watching``) watches it too (``WorkerPool``'s at least every ``POLL`` seconds:
``halting_wait``; ``InlinePool``'s between units: ``check_halt``) and ends with ``Halted``,
which unwinds the reading as an interrupt does: its pool is closed on the way out, its
workers terminated, and the states stay at the last item handed out. A halt is set only when
what the thread reads is closed (or goes on from a state: ``Ahead.set_weights``): nothing
the halted reading was doing goes on.

A pool's close waits for the step of a run going on on another thread, which it wakes, and
the run ends (``stopped``) before the workers and pipes go, never torn out from under it.

A signal whose exception something swallowed (C code that calls back into Python and clears
what it raised) is raised again between units (``check_halt``; ``interrupts`` says how).

A signal must not cut a worker's start in two (``held_signals``): its handler, which Python
runs on the main thread at its next bytecode, raised there between the fork and the pool's
noting of the worker (a ``KeyboardInterrupt`` left the worker's process unwaited, its pipes
open), or inside another library's fork hook, which swallowed it. Nor may SIGCHLD be ignored
(``check_children_waited``): the kernel would reap the workers before the pool waits for them.

Python 3.12 warns at a fork in a process with threads (``forking``): the pool's first run
may start its workers on the read-ahead's own thread, and a library's threads (pyarrow's
allocator, tqdm's monitor) live on; the workers run only our code, which takes no lock of
theirs, so the warning is silenced there, and only there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from openwebtext.errors import OWTError, WorkerError
from openwebtext.interrupts import check as check_signal
from openwebtext.interrupts import deferred

__all__ = [
    "EXITING", "POLL", "Halt", "Halted", "check_children_waited", "check_halt", "end_worker",
    "forking", "halting_wait", "held_signals", "one_at_a_time", "start_failed", "stopped",
]  # fmt: skip

#: How often (seconds), at most, a pool's wait on a thread that watches a halt looks at it.
POLL = 0.05

_here = threading.local()


class Halted(BaseException):
    """A wait of a pool ended by another thread (``Halt.set``): the reading stops. A
    ``BaseException``, as ``KeyboardInterrupt`` is: no handler of errors takes it for one."""


class Halt:
    """What another thread sets to end, at once, the waits of the thread that watches it."""

    def __init__(self) -> None:
        self._set = threading.Event()

    def set(self) -> None:
        """End the watching thread's waits (now, or at its next). Thread-safe; for good."""
        self._set.set()

    def is_set(self) -> bool:
        return self._set.is_set()

    @contextmanager
    def watching(self) -> Iterator[Halt]:
        """The calling thread's waits on workers watch this halt while the block runs."""
        before = getattr(_here, "halt", None)
        _here.halt = self
        try:
            yield self
        finally:
            _here.halt = before


def halting_wait(seconds: float) -> float:
    """How long a wait of the calling thread for ``seconds`` may block (a pool's wait): at
    most ``POLL`` on a thread that watches a halt; ``Halted`` if it is set."""
    check_halt()
    return seconds if getattr(_here, "halt", None) is None else min(seconds, POLL)


def check_halt() -> None:
    """Raise ``Halted`` if the halt the calling thread watches is set; or ``Interrupted`` for
    a signal an ``owt`` command took whose exception something swallowed (``interrupts.check``:
    nothing outside a command)."""
    check_signal()
    halt: Halt | None = getattr(_here, "halt", None)
    if halt is not None and halt.is_set():
        raise Halted("another thread closed what this thread was reading")


#: Set by the program's exit as it closes the pools still open (``parent._close_open``).
EXITING = threading.Event()


def stopped() -> NoReturn:
    """End a run whose pool another thread closed: with the pool-closed error; but at the
    program's exit on a daemon thread (the exit's close), with ``SystemExit`` itself, which
    ends a thread without a word (``threading.excepthook`` ignores that type, not a subclass),
    its ``finally`` blocks run and a ``join`` of it returning: an error would print a traceback
    at every exit of a program that reads on such a thread, and a thread left waiting would
    hang an exit handler that joins it."""
    if EXITING.is_set() and threading.current_thread().daemon:
        raise SystemExit("this worker pool was closed as the program exits")
    raise WorkerError("this worker pool is closed")


@contextmanager
def one_at_a_time(lock: threading.Lock | threading.RLock, ours: bool) -> Iterator[None]:
    """Hold ``lock`` for a pool's close: a program's exit closes the pools still open while a
    stage's thread may be closing one (two at once closed a process the other was joining),
    or reading one (the close waits for its step). Not in a forked copy (``ours`` False),
    which may hold the lock copied held, and only closes its pipes' copies; else not for
    ever (5 s)."""
    held = ours and lock.acquire(timeout=5.0)
    try:
        yield
    finally:
        if held:
            lock.release()


def check_children_waited() -> None:
    """Raise ``OWTError`` where this process ignores SIGCHLD (``SIG_IGN``): the kernel reaps
    its children then, so ``multiprocessing`` takes a worker that exited alive for ever (its
    ``close`` fails at the end of every run). The host's signal is left as it is. Read from the
    kernel where it says (``SigIgn``): C code (Ray's core worker) sets it past Python's view."""
    sigchld = getattr(signal, "SIGCHLD", None)
    if sigchld is None:
        return
    ignored = signal.getsignal(sigchld) == signal.SIG_IGN
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", encoding="utf-8") as f,
    ):
        masks = [line.split()[1] for line in f if line.startswith("SigIgn:")]
        ignored = ignored or bool(int(masks[0], 16) >> (sigchld - 1) & 1)
    if ignored:
        raise OWTError("this process ignores SIGCHLD (signal.SIG_IGN): the kernel reaps its "
                       "children, so worker processes could never be waited for; set it to "
                       "signal.SIG_DFL, or read with workers=0")  # fmt: skip


#: The signals whose Python handlers a worker's start holds back: the two a program is
#: stopped by (its own handler, ``KeyboardInterrupt``'s, or ``owt``'s ``Interrupted``).
HELD: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)

#: The handlers held back now, outermost first: what a process forked meanwhile gets back.
_HELD: list[dict[int, Callable[[int, FrameType | None], Any]]] = []


@contextmanager
def held_signals() -> Iterator[None]:
    """Hold back the Python handlers of ``HELD`` while the block runs (a worker started and
    noted), then run each of those that came, once, as it would have run then (Ctrl-C's
    raises ``KeyboardInterrupt`` after the block, even one that raised). Only the main thread
    runs handlers: on another nothing lands in the block. A signal a handler of C (``SIG_DFL``,
    ``SIG_IGN``) takes is left to it; ``owt``'s handler holds its own (``deferred``)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    held: dict[int, Callable[[int, FrameType | None], Any]] = {}

    def hold(signum: int, frame: FrameType | None) -> None:
        if signum not in came:
            came.append(signum)

    _HELD.append(held)
    try:
        with _masked():  # (no handler runs between two swaps: none is left swapped)
            for number in HELD:
                handler = signal.getsignal(number)
                if callable(handler) and handler != deferred.handle:
                    held[number] = handler
                    signal.signal(number, hold)
        with deferred:
            yield
    finally:
        _HELD.pop()
        with _masked():  # (one that comes now waits for every handler put back)
            for number, handler in held.items():
                signal.signal(number, handler)
        _replay(came, held)


@contextmanager
def _masked() -> Iterator[None]:
    """``HELD`` blocked for this thread while the block runs (one that comes meanwhile is
    delivered at its end, to the handler then in place)."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set(HELD))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _replay(came: list[int], held: dict[int, Callable[[int, FrameType | None], Any]]) -> None:
    """Run the handler of each signal that came while held, once, in order; every one runs
    though one raises (the first error is raised after them: a SIGTERM's handler that raises
    leaves a Ctrl-C that came too its own)."""
    first: BaseException | None = None
    for number in came:
        try:
            held[number](number, None)
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


def _put_back() -> None:
    """In a process forked while handlers are held (the worker, or any other fork meanwhile):
    the handlers as they were, at once."""
    if _HELD:
        for number, handler in _HELD[0].items():
            signal.signal(number, handler)
        _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_put_back)


@contextmanager
def forking() -> Iterator[None]:
    """Start worker processes by fork without Python's (3.12+) warning that this process has
    threads (the module's docstring says why it does not apply), nor an error under ``-W
    error``. (``warnings.catch_warnings`` is process-wide: a warning another thread raises
    meanwhile is filtered as the others are, only this one message ignored.)"""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks",
                                category=DeprecationWarning)  # fmt: skip
        yield


def start_failed(exc: BaseException) -> WorkerError | None:
    """What a worker that could not start says (None: ``exc`` is no such cause: raise it): the
    system's refusal (an ``OSError``: no memory, too many processes), or a fork at the
    program's exit, which Python 3.12+ refuses once its main thread has ended (a thread that
    reads on after it starts the pool then)."""
    if isinstance(exc, RuntimeError) and "shutdown" in str(exc):
        return WorkerError("cannot start a worker process: the program is exiting (its main "
                           "thread has ended, and Python forks no more then): keep the main "
                           "thread until the reading ends (join the thread that reads), or "
                           "read with workers=0")  # fmt: skip
    if isinstance(exc, OSError):
        return WorkerError(f"cannot start a worker process: {exc}")
    return None


def end_worker(process: Any, pipes: Sequence[Any], ours: bool, deadline: float) -> None:
    """End a worker of a pool being closed (``WorkerPool.close``): waited for until
    ``deadline`` (polled: a fork on another thread may hold its pipe), killed past it, then
    its ``pipes`` closed. A forked copy's pool (``ours`` False) closes its pipes' copies only.
    A worker whose wait a handler's exception cut before ``multiprocessing`` noted it (it
    reads as running for ever) is left to the system, never an error."""
    while ours and process.is_alive() and time.monotonic() < deadline:
        process.join(0.05)
    if ours:
        if process.is_alive():
            process.kill()
            process.join()
        with contextlib.suppress(ValueError):
            process.close()
    for pipe in pipes:
        pipe.close()
