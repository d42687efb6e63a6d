"""Waits on workers that another thread can end at once (``Halt``).

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
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["POLL", "Halt", "Halted", "check_halt", "halting_wait"]

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
    """Raise ``Halted`` if the halt the calling thread watches is set."""
    halt: Halt | None = getattr(_here, "halt", None)
    if halt is not None and halt.is_set():
        raise Halted("another thread closed what this thread was reading")
