"""What a packer needs of a running stream of token documents (``DocumentSource``), and the
runs of documents it hands them out in (``TokenRun``).

A packer (``Batches``, ``BestFitBatches``) never takes documents one by one: the stream hands
out the rest of a block's documents at once, their ids copied out of the block in one array
(as its units hold them, or in hand-out order), so that the packers' work is a few array
operations per batch or window, not Python per document. A run
knows the stream's mark before each of its documents (only the position in the block differs
between them), so a packer's state is the same as if it had read them one at a time.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
from collections.abc import Callable, Generator
from typing import (
    Any,
    Concatenate,
    Generic,
    NamedTuple,
    NoReturn,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypeVar,
)

import numpy as np

from openwebtext.stream.mixschema import MixMark, MixRun
from openwebtext.stream.schema import DocumentState, MixtureState
from openwebtext.stream.sections import Packed
from openwebtext.stream.state import Mark, Stats
from openwebtext.stream.turns import (
    STEADY,
    InsideNext,
    OtherThread,
    OwnNext,
    closed,
    executing,
    not_own_next,
    on_this_thread,
)

__all__ = [
    "AnyMark", "Closing", "DocumentSource", "Packer", "Run", "RunParts", "Running", "TokenRun",
    "WindowAhead", "copied", "failed_earlier", "failure", "guarded", "slots_at",
]  # fmt: skip

#: A best-fit window an old rank had begun, as a resharded share hands it out first:
#: ``(documents, number, rows handed out, packings)`` (packings: under a schedule).
WindowAhead = tuple[int, int, int, tuple[Packed, ...]]

#: What a stream hands out a run as: ``TokenRun``'s ids, starts, lengths and start.
RunParts = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], int]


class TokenRun(NamedTuple):
    """Token documents handed out together, in stream order (``DocumentSource.next_run``).

    All of them lie in one block of one epoch. Their ids are copied out of the block's units
    as the units hold them (not in the order the documents are handed out): document ``j``
    is ``ids[starts[j]:starts[j] + lengths[j]]``.
    """

    ids: np.ndarray[Any, Any]
    starts: np.ndarray[Any, Any]
    """Where each document begins in ``ids`` (int64)."""
    lengths: np.ndarray[Any, Any]
    """Each document's ids (int64)."""
    start: int
    """Where the first document's ids begin in that document: 0, but for one cut across a
    resharded checkpoint of batches (its first ids were targets before)."""
    before: Mark
    """The stream's mark before the first document."""
    after: Mark
    """The stream's mark after the last document."""

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def epoch(self) -> int:
        """The epoch of the documents."""
        return self.after.epoch

    def mark_before(self, j: int) -> Mark:
        """The stream's mark before document ``j``: what ``mark()`` said just before it."""
        if j == 0:
            return self.before
        return self.after._replace(in_block=self.after.in_block - len(self.lengths) + j)

    def first_slot(self) -> int:
        """The document slot of its first document (``slots_at``; document ``j``'s is this
        plus ``j``: they lie in one block, kept ones first). Past the slot ``before`` says when
        blocks all of whose documents were skipped lie between."""
        return slots_at(self.after._replace(in_block=self.after.in_block - len(self.lengths)))

    def end_to_end(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The documents' ids one after another, and where each ends in them."""
        starts, lengths = self.starts, self.lengths
        ends = np.cumsum(lengths)
        if len(starts) and (starts[1:] == starts[:-1] + lengths[:-1]).all():  # in order
            return self.ids[starts[0] : starts[0] + (ends[-1] if len(ends) else 0)], ends
        bounds = zip(starts.tolist(), (starts + lengths).tolist(), strict=True)
        return np.concatenate([self.ids[:0], *[self.ids[a:b] for a, b in bounds]]), ends


def slots_at(mark: Mark) -> int:
    """The document slots of its epoch's share a stream had passed at ``mark``, as the document
    counts count them (a document skipped for its content holds one, a block's skipped ones
    after its kept ones: ``epochs.slots_passed``), since the stream's iterator began: the
    documents handed out, and the slots skipped with none (``Mark.skipped_slots``, and the
    current block's after its last document once that one is out: ``Mark.tail``). Differences
    of two marks are what a best-fit window counts, as a reshard deals one (``rest.Rest``).
    After the last document of a best-fit window's overrun (``Mark.overrun``), the window's end:
    the slots it did not fill are passed with that document (as ``Mark.state`` says), not when
    the stream goes on, so that the next window starts there whenever its start is taken."""
    handed = mark.counters.epoch_documents + mark.in_block - mark.first_in_block
    if mark.overrun is not None and handed >= mark.overrun.last:
        return mark.overrun.end
    past = mark.tail if mark.in_block >= mark.block_len else 0
    return int(handed + mark.skipped_slots + past)


#: A run of a corpus, or of a mixture (``mixschema.MixRun``: the same reading, marks per part).
Run: TypeAlias = "TokenRun | MixRun"
#: A corpus's mark, or a mixture's.
AnyMark: TypeAlias = "Mark | MixMark"


class DocumentSource(Protocol):
    """A running stream of token documents, as the packers read it (``DocumentIterator``, or
    ``MixtureIterator``)."""

    def next_run(self, in_order: bool = False) -> Run:
        """The next documents (``StopIteration`` at the end of the stream); with
        ``in_order``, their ids one after another in the order they go out."""
        ...

    def mark(self) -> AnyMark:
        """Where the stream is now, after the last document handed out."""
        ...

    def state(self, mark: Any = None) -> DocumentState | MixtureState:
        """The stream's state now, or at ``mark``, as its record."""
        ...

    def windows_ahead(self) -> list[WindowAhead]:
        """In a resharded epoch of best-fit batches: the windows old ranks had begun that
        this share hands out first, as ``(documents, number, rows handed out, packings)``."""
        ...

    @property
    def stats(self) -> Stats:
        """The stream's counts so far."""
        ...

    def close(self) -> None:
        """Stop the workers now."""
        ...


C = TypeVar("C", bound="Closing")
P = TypeVar("P", bound="Packer")
A = ParamSpec("A")
T = TypeVar("T")


class Closing:
    """An iterator that owns workers (or a thread) until ``close``: in ``with``, closed on the
    way out (``Packer``, ``Running``, ``Ahead``, ``MixtureBatches``)."""

    def close(self) -> None:
        """Stop the workers now. Safe to call twice."""
        raise NotImplementedError

    def __enter__(self: C) -> C:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"a running {type(self).__name__} does not pickle (it owns its workers and what they "
            "read): pickle its Loader and its state_dict(), and go on from them with "
            "Loader.iter(state=...) or Loader.batches(..., state=...)"
        )

    def __exit__(self, *exc: object) -> None:
        self.close()


def copied(value: Any, **fields: Any) -> Any:
    """A copy of an object whose fields a packer sets as batches go, with ``fields`` instead
    (copies of those it changes in place)."""
    new = object.__new__(type(value))
    new.__dict__.update(vars(value), **fields)
    return new


def guarded(method: Callable[Concatenate[P, A], T]) -> Callable[Concatenate[P, A], T]:
    """``method`` of a packer run holding its ``_turn``: a ``state_dict`` or ``stats`` asked
    for on another thread waits for the batch being made (``next`` holds it)."""

    def held(self: P, /, *args: A.args, **kwargs: A.kwargs) -> T:
        not_own_next(self._inside, "stats" if method.__name__ == "stats" else "state_dict()")
        with self._turn:
            return method(self, *args, **kwargs)

    functools.update_wrapper(held, method)
    return held


class Packer(Closing):
    """What every packer (``Batches``, ``BestFitBatches``) is besides its batches: the owner
    of its documents until it is closed, in ``with``. Closed, it has ended: ``next`` raises
    ``StopIteration`` (as a closed generator's), the batches it had made are not handed out.

    An error inside ``next`` (a Ctrl-C while its documents are read, a bad state found) leaves
    the packer as the last batch handed out left it: its ``_KEPT`` fields, what its state and
    stats are made of, are put back, so ``state_dict()`` resumes after that batch; the
    documents read meanwhile are gone with the stream, so it is closed, and a ``next`` after
    says so (never a silent end, nor batches from a stream missing those documents).
    """

    _docs: DocumentSource
    _closed = False
    _closer = 0
    """The thread that closed it (a packer closes itself before it raises a bad state's error)."""
    _closing: tuple[int, threading.Event] | None = None
    """A close under way: its thread, and what is set once it has ended (done or refused)."""
    _failed = ""
    _at: AnyMark | None = None
    """Where the stream was when the packer held no document it had read (its state's)."""
    _KEPT: tuple[str, ...] = ()
    _inside: int | None = None
    """The thread inside ``next`` (``not_own_next``)."""

    def __init__(self, documents: DocumentSource) -> None:
        self._docs = documents
        self._turn = threading.RLock()
        """Held by ``next`` and by ``state_dict`` and ``stats``, which another thread may ask
        for: they wait for the batch being made, and say the state after it."""

    def __next__(self) -> Any:
        made: list[dict[str, Any]] = []
        try:
            return self.next_batch(made)
        except BaseException as exc:  # (a signal's handler raised after the batch was made)
            self.put_back(made, exc)
            raise

    def next_batch(self, made: list[dict[str, Any]]) -> Any:
        """``next``, saying in ``made`` (this call's own) what the batch was made from, once
        it is made: ``put_back`` puts it back if the batch never reaches the caller."""
        not_own_next(self._inside, "next()")
        me = threading.get_ident()
        try:  # (inside until the batch is out: a signal's handler asking for the state then
            with self._turn:  # is told it runs inside next, never given the state after it)
                self._inside = me
                batch = self._held_next(made)
            return batch
        finally:
            if self._inside == me:  # (not another thread's, in since the turn was left)
                self._inside = None

    def put_back(self, made: list[dict[str, Any]], exc: BaseException) -> None:
        """The batch a ``next_batch`` made never reached its caller (``exc``, a signal's
        handler's, raised in between): the fields it was made from (``made``) put back, as if
        it was made in error (the packer ends; its state resumes before that batch)."""
        if made and not isinstance(exc, StopIteration):
            with self._turn:
                self.__dict__.update(made.pop())
                self._failed = failure(exc)
                self._shut()

    def _held_next(self, made: list[dict[str, Any]]) -> Any:
        """``next``, holding the turn; ``made`` says, once the batch is made, what it was made
        from (``put_back``: an exception after it, before the batch is out)."""
        if self._failed:
            raise failed_earlier(self._failed)
        if self._closed:
            raise StopIteration
        saved = {name: getattr(self, name) for name in self._KEPT}
        saved.update(self._copies())
        try:
            batch = self._batch()
            if self._closed_by_another():  # (between two reads of documents: to their end)
                self.__dict__.update(saved)
                raise StopIteration
        except StopIteration:
            raise
        except BaseException as exc:
            self.__dict__.update(saved)
            if self._closed_by_another():  # (a stage's close: its Halted): the end
                raise StopIteration from None
            self._failed = failure(exc)
            self._shut()
            raise
        made.append(saved)
        return batch

    def _closed_by_another(self) -> bool:
        """Whether another thread closed the packer during this ``next`` (a close under way
        is waited for: refused, the ``next`` goes on, or raises what it raised)."""
        me, closing = threading.get_ident(), self._closing
        if closing is not None and closing[0] != me:
            closing[1].wait(60)
        return self._closed and self._closer != me

    def _batch(self) -> Any:
        """The next batch (``next``), changing the fields as it goes."""
        raise NotImplementedError

    def _copies(self) -> dict[str, Any]:
        """Copies of the ``_KEPT`` fields ``_batch`` changes in place (and ``_at``, if the
        packer holds no document it read)."""
        return {}

    def close(self) -> None:
        """Stop the workers now: the batches end here. Safe to call twice. From another thread
        while a ``next`` runs: ``InsideNext`` (that ``next`` goes on), but for a stage's; inside
        its own ``next`` (a signal handler): ``OwnNext`` (it goes on whole)."""
        not_own_next(self._inside, "close()")
        self._shut()

    def _shut(self) -> None:
        """``close``, also from inside ``next`` (the packer ends itself there: run out, or a
        bad state found)."""
        me, settled, refused = threading.get_ident(), threading.Event(), False
        self._closing = (me, settled)
        try:
            self._docs.close()
        except (InsideNext, OwnNext):
            refused = True
            raise
        finally:
            if not refused:
                self._closed, self._closer = True, me
            self._closing = None
            settled.set()


def failure(exc: BaseException) -> str:
    """What ``Failing.failed`` says of an error a stream's documents ended with ("" for a
    close: ``GeneratorExit`` at a ``yield`` is no failure)."""
    if isinstance(exc, GeneratorExit):
        return ""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def failed_earlier(failed: str) -> RuntimeError:
    """What ``next`` raises after batches failed inside an earlier ``next`` (``failed``, as
    ``failure`` says it): never a silent end (``Packer``, ``Ahead``)."""
    return RuntimeError(f"the batches failed inside an earlier next() ({failed}); go on from "
                        "their state_dict(): after the last batch handed out")  # fmt: skip


class Failing(Protocol):
    failed: str
    """The error the stream's documents ended with ("": none): they cannot go on."""


S = TypeVar("S", bound=Failing)


class Running(Closing, Generic[S]):
    """What the document iterators (``DocumentIterator``, ``MixtureIterator``) share: the
    generator of their stream, whose state stays at the last document handed out whatever
    ends it; after an error (a Ctrl-C inside ``next``) ``next`` and ``iter`` say so, never
    a silent end."""

    _gen: Generator[Any, None, None]
    _runs: Generator[Any, None, None] | None = None
    _stream: S

    def __iter__(self) -> Generator[Any, None, None]:
        # The generator itself: ``for`` then resumes it directly, with no Python-level
        # ``__next__`` call per document.
        self._check()
        return self._gen

    def __next__(self) -> Any:
        try:
            return next(self._gen)
        except StopIteration:
            self._check()
            raise
        except ValueError as exc:
            if not executing(exc):  # (the stream's own error: as it is)
                raise
            if on_this_thread([self._gen]):
                raise OwnNext("next()") from None
            raise InsideNext("next()") from None

    def _end(self, *others: Generator[Any, None, None] | None) -> None:
        """Close the stream's generators (``others`` too), for ``close``; refused while another
        thread is inside ``next`` (a generator cannot be closed there, and a pool closed under
        it would end its read with a worker's error): an iterator is read and closed on one
        thread; a stage (``ahead``, ``Loader.batches(...).start()``) is closed from any."""
        generators = [gen for gen in (self._gen, *others) if gen is not None]
        if on_this_thread(generators):
            raise OwnNext("close()")
        if any(inspect.getgeneratorstate(gen) == inspect.GEN_RUNNING for gen in generators):
            raise InsideNext()
        for gen in generators:
            if not closed(gen):  # (entered since the look)
                raise InsideNext()

    def _steady(self, what: str, read: Callable[[], T]) -> T:
        """``read()`` of the stream (its mark, its stats) while no thread is inside ``next``:
        read twice, its generators idle before, between and after, the two reads the same;
        else again (another thread inside ``next`` changes what is read, field by field, and
        a state read then is one no run was ever at), for up to ``STEADY`` seconds.

        Raises:
            OtherThread: another thread stayed inside ``next`` all that while.
            OwnNext: this thread is (a signal handler's, a callback's).
        """
        generators = [gen for gen in (self._gen, self._runs) if gen is not None]
        if on_this_thread(generators):
            raise OwnNext(what)

        def inside() -> bool:
            return any(inspect.getgeneratorstate(g) == inspect.GEN_RUNNING for g in generators)

        end = time.monotonic() + STEADY
        while True:
            if not inside():
                first = read()
                if not inside():
                    second = read()
                    if not inside() and first == second:
                        return second
            if time.monotonic() > end:
                raise OtherThread(what)
            time.sleep(0.001)

    def _check(self) -> None:
        if self._stream.failed:
            raise RuntimeError(f"the documents failed inside an earlier next() "
                               f"({self._stream.failed}); go on from their state_dict(): after "
                               "the last document handed out")  # fmt: skip
