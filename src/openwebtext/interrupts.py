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

A raise from a handler can be swallowed: it lands wherever the main thread is, and C code
that calls back into Python and clears what it raised (a Cython module's import registering
its types with ``collections.abc``: numpy's random generators, imported on first use) or a
``__del__`` takes it for its own error and goes on. So the handler notes the signal it raised
(``_Deferral.owed``) until the command ends on it, and the readers' loops look between
units (:func:`check`, through ``engine.halting.check_halt``), the commands' between chunks
of their output: an endless ``owt stream`` went on for ever after such a Ctrl-C. Whatever
a command ends with while a signal is owed, it ends as interrupted.

The handler belongs to the process that installed it. A process forked from a command
(a ``multiprocessing`` pool, a library's helper) would inherit it, and there it hangs:
``Pool.terminate`` sends SIGTERM to a worker that is about to block in a semaphore; a
Python-level handler only runs when the interpreter next checks for signals, which a
thread blocked in C never does, so the worker never dies and the pool waits forever.
So right after a fork the child puts back what each signal did before the command took
it (:func:`_after_fork`), at the C level, and a child that still runs the handler (forked
in the instant before) does the same and re-sends the signal to itself: a fork behaves as
if no command had ever touched its signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Collection, Iterator
from types import FrameType, TracebackType
from typing import Any

__all__ = [
    "EXIT_INTERRUPTED", "Interrupted", "came_early", "check", "deferred", "exit_code",
    "hand_over", "interruptible", "owed", "raise_early",
]  # fmt: skip

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
        self.owner: int | None = None
        """The process that installed the handler; in any other, it steps aside."""
        self.previous: dict[int, Any] = {}
        """What each signal did before :func:`interruptible` took it."""
        self.owed: int | None = None
        """The signal raised as :class:`Interrupted` (or dropped for an exception already on
        its way out) that the command has not ended on yet: :func:`check` raises it again
        where something swallowed it."""

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
            signum = self.owed = self.pending
            self._clear()
            if kind is None:  # an exception already on its way out ends the command (owed)
                raise Interrupted(signum)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self.owner:  # a fork: act as the signal did before the command
            self.step_aside()
            os.kill(os.getpid(), signum)
            return
        if self.depth and self.pending is None:
            self.pending = signum  # the first signal waits for the section to end
            self._alarm = signal.signal(signal.SIGALRM, self._give_up)
            signal.setitimer(signal.ITIMER_REAL, self.grace)
            return
        signum = self.owed = self.pending or signum
        self._clear()
        raise Interrupted(signum)

    def _give_up(self, alarm: int, frame: FrameType | None) -> None:
        signum = self.owed = self.pending or signal.SIGINT
        self._clear()
        raise Interrupted(signum)

    def step_aside(self) -> None:
        """Put back what each signal did before the command took it (in a forked child)."""
        with contextlib.suppress(ValueError):  # not the main thread: nothing Python can do
            for signum, handler in self.previous.items():
                if signal.getsignal(signum) == self.handle:
                    signal.signal(signum, handler)
            if self._alarm is not None:  # timers do not survive a fork; the handler does
                signal.signal(signal.SIGALRM, self._alarm)
        self._alarm = None
        self.owner, self.previous, self.depth, self.pending, self.owed = None, {}, 0, None, None

    def _clear(self) -> None:
        if self._alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._alarm)
            self._alarm = None
        self.pending = None


def _after_fork() -> None:
    if deferred.owner is not None:
        deferred.step_aside()


#: Seconds a held signal waits for a critical section to end.
GRACE_SECONDS = 2.0

#: ``with deferred:`` — a signal arriving inside the block is raised when it ends.
deferred = _Deferral(GRACE_SECONDS)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


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
    owner, before, owed = deferred.owner, deferred.previous, deferred.owed
    mask = _block()  # (the handler never runs before its owner is set)
    for signum in _SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            previous[signum] = signal.signal(signum, deferred.handle)
    taken: dict[int, Any] = {s: h for s, h in previous.items() if h != deferred.handle}  # nested
    deferred.owner, deferred.previous = os.getpid(), {**before, **taken}
    try:
        _unblock(mask)  # (one that came meanwhile is raised here, inside the try)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        deferred.owner, deferred.previous, deferred.owed = owner, before, owed
        deferred._clear()


#: Signals the console entry point blocked while the package loaded (``hand_over``).
_handed: set[int] = set()


def hand_over(held: Collection[int]) -> None:
    """Leave ``held`` (blocked while ``owt`` loaded, by ``openwebtext_cli``) blocked until the
    command's handler is in place: :func:`interruptible` takes one that came meanwhile
    (:func:`came_early`) and unblocks them. (Unblocked before, a SIGTERM in between ended
    the process by the signal itself.)"""
    _handed.update(held)


def _block() -> set[int] | None:
    """Block SIGINT and SIGTERM while the handlers are set up: the mask before (None where
    there are no masks)."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        return None
    return signal.pthread_sigmask(signal.SIG_BLOCK, set(_SIGNALS))


def _unblock(mask: set[int] | None) -> None:
    """Put ``mask`` back, those the console entry point handed over unblocked too; one of
    them that came while they were held is taken first, for the command to raise as it
    opens (``came_early``). Any other that came meanwhile is raised here."""
    if mask is None:  # pragma: no cover - not POSIX
        return
    handed = set(_handed)
    came = sorted(handed.intersection(signal.sigpending()))
    for signum in came:
        signal.sigwait({signum})  # (taken: not raised at the unblock)
    _handed.difference_update(handed)
    if came:
        came_early(came[-1])  # (SIGTERM's 143 over SIGINT's 130 when both came)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask - handed)


def check() -> None:
    """Raise :class:`Interrupted` again for a signal the command's handler raised that
    something swallowed (``_Deferral.owed``): called between units by the readers' loops. Not
    while the interrupt is on its way out (its ``finally`` blocks run), inside a held section,
    on another thread or in a forked process; nothing at all outside a command."""
    signum = deferred.owed
    if signum is None or deferred.depth or deferred.owner != os.getpid():
        return
    on_its_way_out = isinstance(sys.exc_info()[1], KeyboardInterrupt)
    if threading.current_thread() is threading.main_thread() and not on_its_way_out:
        raise Interrupted(signum)


def owed() -> int | None:
    """The signal the command took and has not ended on (None: none): whatever the command
    ends with then, it ends as interrupted by it."""
    return deferred.owed if deferred.owner == os.getpid() else None


_early: list[int] = []


def came_early(signum: int) -> None:
    """Note a signal that came while ``owt`` loaded, held until the command could take it
    (``openwebtext_cli``): :func:`raise_early` raises it."""
    _early[:] = [signum]


def raise_early() -> None:
    """Raise :class:`Interrupted` for a signal that came while ``owt`` loaded, once: where the
    command can end as it would have then (``owt stream``: as it opens, ``--state-out``
    written)."""
    if _early:
        raise Interrupted(_early.pop())
