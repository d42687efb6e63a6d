"""Batches made ahead on a thread, each handed out with the state after it (``ahead``).

A thread takes batches from a source (``Loader.batches``, a ``StatefulDataLoader``, ...), notes
the source's ``state_dict()`` after each, optionally moves it (``move``: the device stage copies
it to the accelerator there), and queues up to ``depth`` of them. The state handed out is the
batch's: ``state_dict()`` is the source's state after the last batch the consumer took, never
where the thread has read ahead to (the batches in flight are read again on resume), as grain's
prefetch and torchdata's nodes do. ``start()`` starts the thread before the first batch is asked
for, so that the workers start and the first batches are made while a checkpoint loads.

The thread owns the source from its start to its end: it closes the source when the batches run
out, when one raises (the error is raised to the consumer, after the batches before it; a
``next()`` after says so, never a silent end), and when the consumer closes or drops the
iterator. A close ends the thread at once, even one waiting for a stuck worker: the thread's
waits on the workers watch its ``Halt``, which the close sets (``engine.Halt``). Only the
source running out ends the batches: a ``StopIteration`` out of ``move``, ``receive`` or
``state_dict()`` is an error of that callable (a ``RuntimeError``, as PEP 479 makes it).

Another thread may close the stage, change its weights (``set_weights``) or take its state
while the consumer waits in ``next()``. A batch is handed out (taken, received, its state
kept) and the source restarted (the state read, the thread replaced) under one lock, never
both at once; the consumer waits for a batch without it. So a batch made before a change is
either handed out before it (the change is at the batch after) or dropped (made again, with
the change): a batch of a replaced thread is never handed out.

``Primed`` is the same idea for ``Loader.batches(...).start()`` itself, without a thread for the
batches: the first runs of documents a packer needs are read on a thread (the workers started,
their prefetch filling) while the caller loads its model; the packer takes them as it would
have, and its states are the same (the stream's mark is the one before them until it does).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from openwebtext.engine import Halt, check_halt
from openwebtext.options import as_int, int_at_least
from openwebtext.stream.producer import (
    END,
    POLL,
    Failed,
    Producer,
    Stateful,
    called,
    unchanged,
)
from openwebtext.stream.schema import DocumentState, MixtureState
from openwebtext.stream.source import (
    AnyMark,
    Closing,
    DocumentSource,
    Run,
    WindowAhead,
    failed_earlier,
    failure,
)
from openwebtext.stream.state import Stats
from openwebtext.stream.turns import not_own_next

__all__ = ["Ahead", "Primed", "Stateful", "ahead"]

log = logging.getLogger("openwebtext")

A = TypeVar("A", bound="Ahead")


class Ahead(Closing):
    """Batches of a source made ahead on a thread, up to ``depth`` (``ahead``).

    Args:
        batches: ``Loader.batches(...)``, a ``StatefulDataLoader``, or any iterable of batches
            with a ``state_dict()`` (its state after the last batch it gave).
        depth: Batches made ahead (at most; the source's own read ahead aside).
        move: Applied to each batch in the thread (e.g. a copy to a device).
        receive: Applied to each batch as it is handed out (e.g. a wait for that copy).

    Raises:
        ValueError: ``depth`` is not an int >= 1.
        TypeError: ``batches`` has no ``state_dict()``.
    """

    def __init__(
        self,
        batches: Stateful,
        depth: int = 2,
        *,
        move: Callable[[Any], Any] = unchanged,
        receive: Callable[[Any], Any] = unchanged,
    ) -> None:
        depth = as_int(depth)
        if not int_at_least(depth, 1):
            raise ValueError(f"depth must be an int >= 1, not {depth!r}")
        if not callable(getattr(batches, "state_dict", None)):
            raise TypeError(f"batches made ahead need a state_dict(), not {batches!r}")
        for name, function in (("move", move), ("receive", receive)):
            if not callable(function):
                raise TypeError(f"{name} must be a callable taking a batch, not {function!r}")
        self.depth = depth
        self._source = batches
        self._move, self._receive = move, receive
        self._producer = Producer(batches, depth, move)
        self._state: dict[str, Any] | None = None  # after the last batch handed out
        self._stats: Any = None  # (its stats)
        self._ended = False
        self._failed = ""  # the error a next() raised, the stage's end: a next() after says so
        # A batch's hand-out, a start, a restart (``set_weights``) and a state read: one at a
        # time (reentrant: a signal handler or ``receive`` may ask for the state meanwhile;
        # ``set_weights`` there is refused: ``_inside``, the thread holding it).
        self._turn = threading.RLock()
        self._inside: int | None = None
        # The consumers (``next``): one at a time, so that one never takes another's batch
        # for lost (two threads in ``next``); held while waiting, ``_turn`` never is.
        self._taking = threading.RLock()

    @contextmanager
    def _turning(self) -> Iterator[None]:
        with self._turn:
            inside, self._inside = self._inside, threading.get_ident()
            try:
                yield
            finally:
                self._inside = inside

    def start(self: A) -> A:
        """Start the source and make the first ``depth`` batches now, in the background (e.g.
        while a checkpoint loads). Safe to call again; ``next()`` starts it too."""
        with self._turning():  # (two threads taking the first batch start it once)
            producer = self._producer
            if producer.thread.ident is None and not (producer.stopping.is_set() or self._ended):
                self._state = self._source.state_dict()  # nothing handed out: the start's
                self._stats = getattr(self._source, "stats", None)  # (never read beside the thread)
                producer.thread.start()
        return self

    def __iter__(self: A) -> A:
        return self

    def __next__(self) -> Any:
        if self._failed:
            raise failed_earlier(self._failed)
        if self._ended:
            raise StopIteration
        made: list[tuple[Any, Any]] = []  # (this call's: the state before its batch)
        self.start()
        try:  # (a Ctrl-C in the wait may come after the item was taken: it is lost too)
            while not self._taking.acquire(timeout=POLL):  # (another thread is in next())
                check_halt()
            try:
                batch = self._hand_out(made)
            finally:
                self._taking.release()
        except BaseException as exc:  # the stage ends here: the batch is lost with it
            if made:  # (made, never handed out: the state before it)
                with self._turn:
                    self._state, self._stats = made.pop()
            self._failed = failure(exc) or type(exc).__name__
            self.close()
            raise
        if batch is END:  # (only the source's end, or a close: never a callable's StopIteration)
            if self._failed:  # (a change the source refused while this one waited)
                raise failed_earlier(self._failed)
            raise StopIteration
        return batch

    def _hand_out(self, made: list[tuple[Any, Any]]) -> Any:
        """The next batch, received, its state kept (the one before it in ``made``); ``END``
        once the batches ran out or were closed. The item is taken without the lock
        (``set_weights`` from another thread never waits for the next batch) and handed out
        under it: an item of a producer replaced meanwhile was made before the change, and is
        dropped (the new one makes it again)."""
        while True:
            producer, item = self._wait()
            with self._turning():
                if self._ended:  # (closed meanwhile: it has ended)
                    return END
                if producer is not self._producer:
                    continue
                if item is END:
                    self.close()
                    return END
                if isinstance(item, Failed):
                    raise item.error
                batch = called("receive", self._receive, item.batch)
                before = self._state, self._stats  # (``__next__`` puts them back: not handed out)
                self._state, self._stats = item.state, item.stats
                made.append(before)
                return batch

    def _wait(self) -> tuple[Producer, Any]:
        """The next item made and its producer, waiting for it; ``END`` once closed. Another
        thread may close the stage or change its weights meanwhile: the wait then ends, or
        goes on with the new producer (its first batch is the change's).

        Raises:
            RuntimeError: the thread ended without a word (neither an end nor an error).
        """
        while True:
            producer = self._producer
            try:
                return producer, producer.ready.get(timeout=POLL)
            except queue.Empty:
                pass
            if self._ended:
                return producer, END
            check_halt()  # (this thread reads for a stage another thread closes)
            self.start()  # (a producer set_weights made meanwhile)
            with self._turning():  # (not being stopped: a replaced producer's queue is drained)
                thread = producer.thread
                if (producer is self._producer and not producer.stopping.is_set()
                        and thread.ident is not None and not thread.is_alive()
                        and producer.ready.empty()):  # fmt: skip
                    raise RuntimeError("the thread making the batches ahead ended without "
                                       "handing out their end or an error")  # fmt: skip

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """New weights of a mixture's batches (``MixtureBatches.set_weights``) from the
        batch after the one handed out last: the batches made ahead are made again.

        Raises:
            TypeError: the batches are not a mixture's.
            ValueError: they were closed, or ran out; or the weights are not valid (then
                the batches go on as they were).
        """
        if not callable(getattr(self._source, "set_weights", None)):
            raise TypeError(f"only a mixture's batches change their weights, not {self._source!r}")
        not_own_next(self._inside, "set_weights()")  # (a batch half handed out on this thread)
        closed = ValueError("set_weights: the batches made ahead were closed, or ran out")
        if self._ended:
            raise closed
        mixture = getattr(self._source, "mixture", None)
        if mixture is not None:  # refused before the thread stops: it could not go on after
            mixture.weights_of(weights, "set_weights")
        with self._turning():  # (no batch handed out from the state read to the new producer)
            if self._ended:
                raise closed
            state = self.state_dict()
            self._producer.stop()  # (it closes the source, which goes on from ``state``)
            try:
                self._source.set_weights(weights, state=state)  # type: ignore[attr-defined]
            except BaseException as exc:  # (the source closed, not gone on: a next() says so)
                self._failed = f"set_weights: {failure(exc) or type(exc).__name__}"
                self._ended = True
                raise
            self._producer = Producer(self._source, self.depth, self._move)
            self._state, self._stats = None, None
            if self._ended:  # (closed from another thread meanwhile: maybe the old producer)
                self._producer.stop()

    @property
    def ready(self) -> int:
        """Batches made ahead, not yet handed out."""
        return self._producer.ready.qsize()

    def state_dict(self) -> dict[str, Any]:
        """The source's state after the last batch handed out (before any: where it starts)."""
        with self._turning():  # (never while the thread is started, or a batch half handed out)
            return self._source.state_dict() if self._state is None else self._state

    @property
    def stats(self) -> Any:
        """The source's ``stats`` (``Loader.batches``') after the last batch handed out, as its
        state: the batches made ahead are not in them (before the first: the source's when the
        stage started, never read while its thread packs).

        Raises:
            AttributeError: the source has no ``stats`` (e.g. a ``StatefulDataLoader``): nor
                has the stage (``hasattr(stage, "stats")`` is False).
        """
        with self._turning():  # (as ``state_dict``)
            if self._stats is not None:
                return self._stats
            try:
                return self._source.stats  # type: ignore[attr-defined]
            except AttributeError:
                if hasattr(type(self._source), "stats"):
                    raise  # (the source's own property failed)
        raise AttributeError(f"the batches made ahead have no stats: their source, a "
                             f"{type(self._source).__name__}, has none")  # fmt: skip

    def close(self) -> None:
        """Stop the thread and the source now. Safe to call twice, and from another thread
        (without waiting for a ``set_weights`` under way: it stops the producer it makes)."""
        self._ended = True
        self._producer.stop()

    def __del__(self) -> None:
        producer = getattr(self, "_producer", None)  # None: __init__ refused its arguments
        if producer is not None:  # an abandoned iterator: the thread closes the source
            producer.stopping.set()
            producer.halt.set()


def ahead(batches: Stateful, depth: int = 2) -> Ahead:
    """``batches`` (e.g. ``Loader.batches(...)``) made ``depth`` ahead on a thread, with the
    state of the batch handed out and ``start()``: see ``Ahead``.

    Example::

        batches = ahead(loader.batches(1024, 8, packing="bestfit", segments=True))
        batches.start()                    # the workers start while the model loads
        restore_model(path)
        for batch in batches:
            ...
            save(model, batches.state_dict())
    """
    return Ahead(batches, depth)


class Primed:
    """A packer's documents (``DocumentSource``) whose first runs are read on a thread now,
    until they hold ``documents`` documents or ``ids`` ids (``Loader.batches(...).start()``).

    The thread is the only one to touch the stream until it ends; every method but
    ``windows_ahead`` waits for it first. Until the packer has taken the runs read ahead, the
    stream's ``mark()`` is the one before them. ``close`` ends the thread at once, even one
    waiting for a stuck worker (its ``Halt``); the state stays the one before the runs it read.
    A read the thread did not finish (an error, a close) leaves the mark where it began: the
    stream has moved inside it (a mixture counted the documents it drew, a corpus passed its
    epoch's end), as a packer reading itself never shows, its state taken before the read.
    """

    def __init__(
        self, documents: DocumentSource, in_order: bool, *, until_documents: int, until_ids: int
    ) -> None:
        self._docs, self._in_order = documents, in_order
        self._before = documents.mark()  # before the first run read ahead not taken
        self._runs: list[Run] = []
        self._cut: AnyMark | None = None  # before a read the thread did not finish
        self._error: BaseException | None = None
        self._ended = False
        self._halt = Halt()  # set by ``close``: the thread's waits on workers end at once
        self._thread = threading.Thread(
            target=self._read, args=(until_documents, until_ids), name="openwebtext-start",
            daemon=True,
        )
        self._thread.start()

    def _read(self, documents: int, ids: int) -> None:
        read = count = 0
        at = self._before
        try:
            with self._halt.watching():
                while read < documents and count < ids:
                    run = self._docs.next_run(self._in_order)
                    self._runs.append(run)
                    read, count = read + len(run), count + int(run.lengths.sum())
                    at = self._docs.mark() if read < documents and count < ids else at
        except StopIteration:
            self._ended = True
        except BaseException as error:  # raised where the packer asks for the next run
            self._error, self._cut = error, at

    def _wait(self, halting: bool = True) -> None:
        """Until the thread has ended (``halting``: or the calling thread is halted, e.g.
        ``ahead``'s reading a stage closed meanwhile: ``Halted``)."""
        while self._thread.is_alive():
            self._thread.join(POLL)
            if halting:
                check_halt()

    def next_run(self, in_order: bool = False) -> Run:
        self._wait()
        if self._runs:
            assert in_order == self._in_order, "read ahead for another packing"
            run: Run = self._runs.pop(0)
            if self._runs:
                self._before = self._runs[0].before
            return run
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._ended:
            raise StopIteration
        self._cut = None  # (the packer reads on itself: the stream's mark is its own)
        return self._docs.next_run(in_order)

    def mark(self) -> AnyMark:
        self._wait()
        if self._runs:
            return self._before
        return self._docs.mark() if self._cut is None else self._cut

    def state(self, mark: Any = None) -> DocumentState | MixtureState:
        return self._docs.state(self.mark() if mark is None else mark)

    def windows_ahead(self) -> list[WindowAhead]:
        return self._docs.windows_ahead()

    @property
    def stats(self) -> Stats:
        """The stream's counts, the runs read ahead included."""
        self._wait()
        return self._docs.stats

    def close(self) -> None:
        self._halt.set()
        self._wait(halting=False)  # (a close goes through)
        self._docs.close()
