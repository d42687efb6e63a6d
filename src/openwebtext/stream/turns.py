"""Which thread is inside an iterator's ``next``: the refusals of a state, ``next`` or
``close`` asked for on another thread, or on that thread itself (a signal handler), and what
tells them apart (a generator's frame on this thread's stack, CPython's "already executing").
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Generator
from typing import Any

__all__ = [
    "STEADY", "InsideNext", "OtherThread", "OwnNext", "closed", "executing", "not_own_next",
    "on_this_thread",
]  # fmt: skip


class _Refusal(RuntimeError):
    """A refusal said of ``what`` (a state, ``next``, ``close``…): made again of ``what`` by
    pickle and copy (its message is built of it, never wrapped twice)."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(message)
        self.what = what

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.what,), self.__dict__


#: How long (seconds) a document iterator's state asked for on another thread waits for the
#: thread inside its ``next`` to hand its document out (``Running._steady``).
STEADY = 10.0


class OtherThread(_Refusal):
    """A document iterator's state, mark or stats (or a mixture's ``set_weights``) asked for
    while another thread stayed inside its ``next`` for ``STEADY`` seconds: they would be read
    (or changed) while that thread changes them, a state no run was ever at."""

    def __init__(self, what: str) -> None:
        super().__init__(
            what,
            f"{what} of a document iterator while another thread stayed inside its next() for "
            f"{STEADY:g} s: take it on the reading thread between two documents; batches "
            "(Loader.batches, ahead(), to_device()) give their state_dict() to any thread"
        )


class OwnNext(_Refusal):
    """A state, mark, stats, ``next``, ``close`` or ``set_weights`` asked for on the thread
    inside the iterator's own ``next`` (a signal handler, or a callback run there): nothing is
    whole there (a state read would be one no run was ever at), and that ``next`` cannot end
    while it waits (a handler waiting for it hangs)."""

    def __init__(self, what: str) -> None:
        super().__init__(
            what,
            f"{what} inside the iterator's own next() on this thread (a signal handler, or a "
            "callback run there): no state is whole there, and that next() cannot end while "
            "it waits; in a signal handler set a flag, and take the state after the step "
            "(ahead() and to_device() give their state_dict() in a handler too)"
        )


def not_own_next(inside: int | None, what: str) -> None:
    """Raise ``OwnNext`` for ``what`` if this thread is ``inside`` (the thread in ``next``)."""
    if inside == threading.get_ident():
        raise OwnNext(what)


def on_this_thread(generators: list[Generator[Any, None, None]]) -> bool:
    """Whether this thread is inside one of ``generators`` (its frame on this thread's stack):
    a signal handler or a callback run inside ``next``."""
    running = {id(getattr(g, "gi_frame", None)) for g in generators
               if inspect.getgeneratorstate(g) == inspect.GEN_RUNNING}  # fmt: skip
    if not running:
        return False
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if id(frame) in running:
                return True
            frame = frame.f_back
        return False
    finally:
        del frame  # (a frame held by its own local: a cycle keeping the caller's generators)


class InsideNext(_Refusal):
    """A ``close`` (or a ``next``) refused: another thread is inside the iterator's ``next``,
    which goes on."""

    def __init__(self, what: str = "close()") -> None:
        fix = ("close an iterator on the thread that reads it (ahead() and to_device() may be "
               "closed from any thread, and Loader.batches(...).start() while it reads ahead)"
               if what == "close()" else "an iterator is read on one thread: hand its items to "
               "the others (a queue), or give each thread an iterator of its own")  # fmt: skip
        super().__init__(what, f"{what} while another thread is inside next(): {fix}")


def executing(exc: ValueError) -> bool:
    """Whether ``exc`` is CPython's "generator already executing", raised by the ``next`` or
    ``close`` call itself (no frame under the caller's: another thread is inside), not an error
    of the generator's own code (its cleanup's) that reads the same."""
    tb = exc.__traceback__
    return "already executing" in str(exc) and tb is not None and tb.tb_next is None


def closed(gen: Generator[Any, None, None]) -> bool:
    """Close ``gen``: False, and it goes on, if another thread is inside it (``executing``)."""
    try:
        gen.close()
    except ValueError as exc:
        if not executing(exc):
            raise
        return False
    return True
