"""The worker protocol: the messages on a worker's pipes, the unit the consumer gets
(``Loaded``), and the life of a task.

Nothing here knows about processes; ``parent`` and ``child`` move these values between
them. One message crosses each way per unit (~390 documents), so the records
are plain ``NamedTuple``s: as cheap to pickle as the bare tuples they replace,
and read by name instead of by position.

consumer → worker
    ``Request(seq, unit, slot)``: read unit number ``unit`` into shared slot
    ``slot`` (None: send the bytes inline). ``None`` instead of a request: exit.
worker → consumer
    ``Done(seq, size, data, names, offsets, sizes, dropped, replace, counts)``:
    the unit's document table; its ``size`` bytes are in the slot, or in
    ``data`` when they travel inline.
    ``Failed(seq, error, traceback)``: the library's error for the unit (an
    unexpected exception becomes an ``UnexpectedError`` naming file and member) and
    the worker's formatted traceback. ``Failed.exception()`` attaches that text
    as the error's ``__cause__`` (a ``WorkerTraceback``), as
    ``concurrent.futures`` does, so the consumer's traceback shows the line in
    the worker where it happened.

A task is one request, known by its sequence number ``seq`` (plan order across
runs). ``Tasks`` holds every task the pool is not finished with, and is the only
place its state changes (each arrow is one method)::

    new ──▶ SENT ──arrived──▶ DONE ──hand_out──▶ HELD ──release──▶ finished (slot freed)
             │ ▲
             │ └──resend── QUEUED ◀──lost: queued behind the unit being read (no blame)
             ├──lost: being read, attempts left──▶ SENT again, first on the fresh worker
             ├──lost: being read, no attempt left──▶ DONE (its result: a WorkerError)
             └──abandon: its run was left──▶ ABANDONED ──arrived or lost──▶ finished

"failed" is DONE with a ``Failed`` result; "retried" is QUEUED, or SENT again.

Leaving a run early also finishes its DONE and QUEUED tasks at once; HELD ones
stay with the consumer until it releases them.
"""

from __future__ import annotations

import enum
import heapq
import traceback
from collections.abc import Sequence
from typing import NamedTuple

from openwebtext.errors import (
    CorruptMember,
    OutOfResources,
    OWTError,
    UnexpectedError,
    WorkerTraceback,
)
from openwebtext.records import Unit

__all__ = [
    "Done",
    "Failed",
    "Loaded",
    "Request",
    "State",
    "Task",
    "Tasks",
    "failed",
    "failure",
]


class Loaded(NamedTuple):
    """One unit as the consumer sees it.

    ``data`` is valid until the next unit is asked for, or with ``hold`` > 0
    until ``release(ticket)``.
    """

    unit: int
    data: memoryview | bytes
    names: Sequence[str]
    offsets: list[int]
    sizes: list[int]
    errors: Sequence[OWTError]
    """A unit-level failure (then the table is empty; its ``__cause__`` says where it was
    raised) or documents left out."""
    replace: int = 0
    """Kept documents that are invalid UTF-8: decode them with ``errors="replace"``."""
    ticket: int = -1
    """What to pass to ``release`` (with ``hold`` > 0)."""
    counts: list[int] | None = None
    """With a tokenizer: ids per document; ``data`` holds ids and ``offsets`` point at them."""


class Request(NamedTuple):
    """Consumer → worker: read a unit."""

    seq: int
    unit: int
    """Its index in the pool's unit table."""
    slot: int | None
    """The shared slot to copy its bytes into; None: send them inline."""


class Done(NamedTuple):
    """Worker → consumer: a unit was read."""

    seq: int
    size: int
    """Bytes of the member (text, or token ids with a tokenizer)."""
    data: bytes | None
    """The bytes when they travel inline (no slot, or larger than one); else None."""
    names: Sequence[str]
    offsets: list[int]
    sizes: list[int]
    dropped: list[CorruptMember]
    """Documents left out (``CorruptDocument``), or the cut of a ``TruncatedMember``."""
    replace: int
    counts: list[int] | None


class Failed(NamedTuple):
    """Worker → consumer: a unit could not be read."""

    seq: int
    error: OWTError
    traceback: str
    """The worker's formatted traceback ("" when the consumer made the error itself)."""

    def exception(self) -> OWTError:
        """The error, with the worker's traceback as its cause."""
        if self.traceback and self.error.__cause__ is None:
            self.error.__cause__ = WorkerTraceback(self.traceback)
        return self.error


def failure(exc: Exception, unit: Unit) -> OWTError:
    """The error to report for ``exc`` raised while reading ``unit``.

    The library's errors already name file and member; anything else is a bug, a
    tokenizer's own error or a missing extra's module, reported as an ``UnexpectedError``
    that names them (never skipped: it is no verdict on the unit's bytes).
    """
    if isinstance(exc, OWTError):
        return exc
    if isinstance(exc, MemoryError):  # (the machine's, not the data's: never skipped)
        return OutOfResources(f"out of memory reading {unit.path}[{unit.member}]",
                              path=unit.path, member=unit.member)  # fmt: skip
    where = f"{unit.path}[{unit.member}]"
    if isinstance(exc, ImportError):  # (the library's own, with how to install it)
        return UnexpectedError(f"cannot read {where}: {exc}", unit.path, unit.member)
    return UnexpectedError(f"unexpected {type(exc).__name__} reading {where}: {exc}",
                           unit.path, unit.member)  # fmt: skip


def failed(seq: int, exc: Exception, unit: Unit) -> Failed:
    """The message for ``exc``, raised while reading ``unit`` (call it in the ``except``)."""
    return Failed(seq, failure(exc, unit), traceback.format_exc())


class State(enum.Enum):
    """Where a task is in its life (see the module docstring)."""

    SENT = "sent"
    QUEUED = "queued"
    DONE = "done"
    HELD = "held"
    ABANDONED = "abandoned"


SENT, QUEUED, DONE, HELD, ABANDONED = State


class Task:
    """One unit requested from the workers."""

    __slots__ = ("attempts", "lane", "result", "seq", "slot", "state", "unit")

    def __init__(self, seq: int, unit: int, slot: int, lane: int = 0) -> None:
        self.seq = seq
        self.unit = unit
        self.slot = slot
        self.lane = lane
        """The lane (a part of a mixture) whose run asked for it: its slots are counted apart."""
        self.state = SENT
        self.attempts = 0
        """Retries spent (a blamed task sent again to a fresh worker)."""
        self.result: Done | Failed | None = None

    def __repr__(self) -> str:
        return f"Task(seq={self.seq}, unit={self.unit}, slot={self.slot}, {self.state.value})"


class Tasks:
    """Every task the pool is not finished with, by ``seq``; the only place states change.

    A task owns a slot from ``new`` until it is finished, so at most ``slots``
    tasks exist. Sequence numbers go on across runs.
    """

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.next_seq = 0
        self._tasks: dict[int, Task] = {}
        self._free = list(range(slots - 1, -1, -1))
        self._queued: list[int] = []  # a heap: the lowest seq is sent again first
        self.owned: dict[int, int] = {}
        """Slots the tasks of each lane hold (a lane's run may hold at most its budget)."""

    def __len__(self) -> int:
        return len(self._tasks)

    def __getitem__(self, seq: int) -> Task:
        return self._tasks[seq]

    @property
    def free(self) -> int:
        """Slots no task holds."""
        return len(self._free)

    def states(self) -> dict[int, State]:
        """Every task's state, by ``seq`` (for tests and debugging)."""
        return {seq: task.state for seq, task in self._tasks.items()}

    # -- transitions ----------------------------------------------------------

    def new(self, unit: int, lane: int = 0) -> Task:
        """A task for ``unit`` (of ``lane``) in a free slot, to send now: SENT."""
        task = Task(self.next_seq, unit, self._free.pop(), lane)
        self._tasks[task.seq] = task
        self.owned[lane] = self.owned.get(lane, 0) + 1
        self.next_seq += 1
        return task

    def resend(self) -> Task | None:
        """The first QUEUED task, to send now (SENT again); None if there is none."""
        if not self._queued:
            return None
        task = self._tasks[heapq.heappop(self._queued)]
        task.state = SENT
        return task

    def arrived(self, message: Done | Failed) -> None:
        """A worker's answer: SENT → DONE; ABANDONED → finished (dropped)."""
        task = self._tasks[message.seq]
        if task.state is ABANDONED:
            self._finish(task)
            return
        assert task.state is SENT, task
        task.state = DONE
        task.result = message

    def ready(self, seq: int) -> Done | Failed | None:
        """The result of task ``seq`` if it is DONE, else None."""
        task = self._tasks.get(seq)
        if task is None or task.state is not DONE:
            return None
        return task.result

    def hand_out(self, seq: int) -> Task:
        """DONE → HELD: the consumer has its unit (and slot) until ``release``."""
        task = self._tasks[seq]
        assert task.state is DONE, task
        task.state = HELD
        task.result = None
        return task

    def release(self, seq: int) -> None:
        """HELD → finished: the consumer is done with the unit. Anything else: nothing."""
        task = self._tasks.get(seq)
        if task is not None and task.state is HELD:
            self._finish(task)

    def lost(self, seq: int, *, blamed: bool, retries: int, error: OWTError) -> Task | None:
        """Task ``seq``'s worker died or hung before answering it.

        Not ``blamed`` (queued behind the one being read): QUEUED. Blamed with
        fewer than ``retries`` attempts: returned, still SENT, to send to the
        fresh worker now. Blamed without: DONE, with ``error`` as its result.
        ABANDONED: finished.
        """
        task = self._tasks[seq]
        if task.state is ABANDONED:
            self._finish(task)
            return None
        assert task.state is SENT, task
        if not blamed:
            task.state = QUEUED
            heapq.heappush(self._queued, seq)
            return None
        if task.attempts < retries:
            task.attempts += 1
            return task
        task.state = DONE
        task.result = Failed(seq, error, "")
        return None

    def abandon(self, lane: int | None = None) -> None:
        """The run (of ``lane``; None: of every lane) was left: SENT → ABANDONED; DONE and
        QUEUED → finished; HELD stays."""
        for task in list(self._tasks.values()):
            if lane is not None and task.lane != lane:
                continue
            if task.state is SENT:
                task.state = ABANDONED
            elif task.state is DONE or task.state is QUEUED:
                self._finish(task)
        if self._queued:  # the QUEUED tasks just finished are no longer sent again
            self._queued = [seq for seq in self._queued if seq in self._tasks]
            heapq.heapify(self._queued)

    def _finish(self, task: Task) -> None:
        del self._tasks[task.seq]
        self._free.append(task.slot)
        self.owned[task.lane] -= 1
