"""The thread's side of the batches made ahead (``readahead.Ahead``): ``Producer`` takes batches
from the source, with its state after each, and queues them; a close ends it at once, and a
queue whose lock an interrupt left held is no wait for ever."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from openwebtext.engine import Halt

__all__ = [
    "END", "POLL", "Failed", "Made", "Producer", "Stateful", "called", "close_source",
    "stopped", "unchanged",
]  # fmt: skip

log = logging.getLogger("openwebtext")

#: How long (seconds) the queue's lock may be held by another thread before a close takes it
#: as held for ever (a put or a take holds it for microseconds).
HELD_FOR_EVER = 1.0

#: How often (seconds) a thread waiting on a full queue checks whether it should stop.
POLL = 0.05


class Stateful(Protocol):
    """What ``ahead`` reads from: batches (an iterator or an iterable) with a state."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...


class Made(NamedTuple):
    """A batch (as ``move`` made it), with the source's state and ``stats`` after it (None:
    the source has no ``stats``)."""

    batch: Any
    state: dict[str, Any]
    stats: Any


class Failed(NamedTuple):
    error: BaseException


END = object()


def unchanged(batch: Any) -> Any:
    return batch


class Producer:
    """The thread's side: owns the source from its start to its close."""

    def __init__(self, source: Stateful, depth: int, move: Callable[[Any], Any]) -> None:
        self.source = source
        self.move = move
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.halt = Halt()  # set with ``stopping``: ends the thread's waits on workers at once
        self.thread = threading.Thread(target=self.run, name="openwebtext-ahead", daemon=True)

    def run(self) -> None:
        try:
            with self.halt.watching():
                self.read()
        except BaseException as error:  # handed to the consumer, raised there (not once stopping)
            if isinstance(error, StopIteration):  # (not the source's end: that is ``END``)
                error = stopped("the batches' iterator", error)
            self.put(Failed(error))
        finally:
            try:
                close_source(self.source)
            except Exception as error:  # (nobody waits on the thread: said, not its traceback)
                log.warning("closing the batches made ahead: %s: %s", type(error).__name__, error)

    def read(self) -> None:
        batches = iter(self.source)
        while not self.stopping.is_set():  # checked before reading on: a close reads no more
            batch = next(batches, END)
            if batch is END:
                self.put(END)
                return
            state = called("the batches' state_dict()", self.source.state_dict)
            stats = called("the batches' stats", getattr, self.source, "stats", None)
            self.put(Made(called("move", self.move, batch), state, stats))

    def put(self, item: Any) -> bool:
        """Queue ``item``, waiting for room; False if the stage is stopping."""
        while not self.stopping.is_set():
            try:
                self.ready.put(item, timeout=POLL)
                return True
            except queue.Full:
                continue
        return False

    def stop(self) -> None:
        """Ask the thread to end, and wait until it has (it closes the source): a wait for
        the workers it is in ends at once (``Halt``)."""
        self.stopping.set()
        self.halt.set()
        if self.thread.ident is None:
            close_source(self.source)
            return
        while self.thread.is_alive():
            if not self.drain():
                log.warning("the thread making batches ahead is left to end with the program: "
                            "an interrupt landed inside the consumer's take from its queue, "
                            "whose lock it left held")  # fmt: skip
                return
            self.thread.join(POLL)
        self.drain()

    def drain(self) -> bool:
        """Drop the batches queued (the thread may wait for room); False: the queue's lock is
        held for ever, by no thread that will release it (a Ctrl-C landed inside a ``with``
        of it on the consumer's thread, between the lock taken and the block begun, which
        leaves it held: the thread waits for it for ever, and so would a wait here)."""
        if not self.ready.mutex.acquire(timeout=HELD_FOR_EVER):
            return False
        try:
            self.ready.queue.clear()
            self.ready.not_full.notify_all()
        finally:
            self.ready.mutex.release()
        return True


def close_source(source: Any) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


def called(what: str, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``; a ``StopIteration`` it raises, a ``RuntimeError`` saying so."""
    try:
        return function(*args)
    except StopIteration as stop:
        raise stopped(what, stop) from stop


def stopped(what: str, stop: StopIteration) -> RuntimeError:
    """What a ``StopIteration`` out of user code is: an error, never the batches' end (which
    would end the stage silently, the thread gone and the next ``next()`` waiting for ever)."""
    said = f": {stop}" if str(stop) else ""
    return RuntimeError(f"{what} raised StopIteration{said} (only the batches running out end "
                        "them)")  # fmt: skip
