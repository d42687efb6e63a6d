"""How the ``owt`` commands end on SIGINT and SIGTERM: the same way, in one place.

The library installs no signal handler (a library must not take signals away from
its host program). The commands do: :func:`interruptible` turns SIGINT and SIGTERM
into :class:`Interrupted` (a ``KeyboardInterrupt``), so every ``finally`` and
``with`` on the way out runs — workers are stopped, temporary files and folders
removed, the state written — and the command exits ``128 + signal`` (130, 143).

:data:`deferred` holds a signal back while a short critical section runs (writing a
line and noting that it was written), so that what a command reports as done is
exactly what it did. A second signal during the section interrupts at once, and so
does the first after ``GRACE_SECONDS`` (a write blocked on a pipe nobody reads).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

__all__ = ["EXIT_INTERRUPTED", "Interrupted", "deferred", "exit_code", "interruptible"]

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 128 + signal.SIGINT

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a command ran.

    Attributes:
        signum: The signal's number.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The exit status a command ends with after ``interrupt``: 128 + its signal."""
    return 128 + getattr(interrupt, "signum", signal.SIGINT)


class _Deferral:
    """Holds signals back while entered; re-entrant; raises the held one on the way out.

    A held signal waits at most ``grace`` seconds: a section blocked for longer (writing
    to a pipe nobody reads) is interrupted then, as is one that gets a second signal.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.depth = 0
        self.pending: int | None = None
        self._alarm: Any = None

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.depth -= 1
        if self.depth == 0 and self.pending is not None:
            signum = self.pending
            self._clear()
            if kind is None:  # an exception already on its way out ends the command anyway
                raise Interrupted(signum)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.depth and self.pending is None:
            self.pending = signum  # the first signal waits for the section to end
            self._alarm = signal.signal(signal.SIGALRM, self._give_up)
            signal.setitimer(signal.ITIMER_REAL, self.grace)
            return
        signum = self.pending or signum
        self._clear()
        raise Interrupted(signum)

    def _give_up(self, alarm: int, frame: FrameType | None) -> None:
        signum = self.pending or signal.SIGINT
        self._clear()
        raise Interrupted(signum)

    def _clear(self) -> None:
        if self._alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._alarm)
            self._alarm = None
        self.pending = None


#: Seconds a held signal waits for a critical section to end.
GRACE_SECONDS = 2.0

#: ``with deferred:`` — a signal arriving inside the block is raised when it ends.
deferred = _Deferral(GRACE_SECONDS)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` while the block runs.

    A signal that whoever started the process ignores (``nohup``, ``&`` in a script)
    stays ignored. Outside the main thread (where Python cannot set handlers) this
    does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in _SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            previous[signum] = signal.signal(signum, deferred.handle)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        deferred._clear()
