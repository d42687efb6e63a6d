"""Batch shapes that change during training: a ``Schedule`` of ``(batch_index, seq_len,
batch_size)`` steps, and the running position in it (``Cursor``).

A schedule says the shape of every batch: batch ``b`` has the shape of the last step at or
before ``b``. Fixed sizes are the schedule of one step. The packers ask the cursor for the
shape of the next batch and move it on once per batch handed out; a batches state records the
steps after the first (``schema.Scheduled.changes``) and the cursor's position (``at``), so
that a state is refused only where the schedule itself differs (``check_schedule``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec
import numpy as np

from openwebtext.errors import StateError
from openwebtext.options import MOST_INT, as_int, countable, int_at_least
from openwebtext.stream.schema import BatchesState, Scheduled, Step
from openwebtext.stream.sections import Packed

__all__ = ["Cursor", "Schedule", "check_schedule", "check_sizes", "saved_schedule", "schedule_of"]


@dataclass(frozen=True)
class Schedule:
    """Batch shapes that change during training (``Loader.batches(schedule=…)``): a table of
    ``(batch_index, seq_len, batch_size)`` steps, the first at batch 0; batch ``b`` has the
    shape of the last step at or before ``b``.

    Under ``packing="concat"`` the ids are the same whatever the schedule: a change only cuts
    them differently, and the ids that do not fill a shape's last row go into the next
    shape's first. Under ``"bestfit"`` the rows of the window not handed out at a change are
    packed again at the new length (docs/packing.md). A saved state records the schedule and
    where the run is in it: it resumes exactly at any batch, and only under the same schedule.

    Args:
        steps: ``(batch_index, seq_len, batch_size)`` triples, batch indices increasing from
            0; ``seq_len`` is the ids a row predicts (a row holds ``seq_len + 1``).

    Raises:
        ValueError: no step, a step that is not three ints, a first step not at batch 0,
            batch indices not increasing, a size below 1 or past ``MOST_INT``, or a batch of more
            than ``MOST_IDS`` ids (as fixed sizes); the message names the step.

    Example::

        schedule = Schedule([(0, 64, 16), (50, 256, 4), (200, 1024, 1)])
        with loader.batches(schedule=schedule) as batches:
            ...
    """

    steps: tuple[tuple[int, int, int], ...]
    """The steps, as ``(batch_index, seq_len, batch_size)`` tuples."""

    def __init__(self, steps: Iterable[Sequence[int]]) -> None:
        if isinstance(steps, str | bytes | Mapping) or not isinstance(steps, Iterable):
            raise ValueError(f"a schedule is a list of (batch_index, seq_len, batch_size) steps, "
                             f"not {steps!r}")  # fmt: skip
        checked: list[tuple[int, int, int]] = []
        for k, step in enumerate(steps):
            if isinstance(step, np.ndarray) and step.ndim == 1:  # (a row of an array of steps)
                step = step.tolist()
            if isinstance(step, (str, bytes)) or not isinstance(step, Sequence) or len(step) != 3:
                raise ValueError(
                    f"schedule step {k} is {step!r}, not (batch_index, seq_len, batch_size)"
                )
            batch, seq_len, batch_size = map(as_int, step)  # (numpy's integers too)
            for name, value, least in (
                ("batch_index", batch, 0), ("seq_len", seq_len, 1), ("batch_size", batch_size, 1)
            ):  # fmt: skip
                if not countable(value, least):
                    raise ValueError(
                        f"schedule step {k} {tuple(step)!r}: {name} must be an int >= {least} "
                        f"and at most {MOST_INT}, not {value!r}"
                    )
            try:  # (the ids of a batch, as fixed sizes)
                check_sizes(seq_len, batch_size)
            except ValueError as exc:
                raise ValueError(f"schedule step {k} {tuple(step)!r}: {exc}") from None
            if not checked and batch != 0:
                raise ValueError(f"schedule step 0 {tuple(step)!r} must be at batch 0")
            if checked and batch <= checked[-1][0]:
                raise ValueError(
                    f"schedule step {k} {tuple(step)!r} must come after batch {checked[-1][0]} "
                    "(batch indices increasing)"
                )
            checked.append((batch, seq_len, batch_size))
        if not checked:
            raise ValueError("a schedule needs at least one step (0, seq_len, batch_size)")
        object.__setattr__(self, "steps", tuple(checked))

    def shape(self, batch: int) -> tuple[int, int]:
        """``(seq_len, batch_size)`` of batch ``batch`` (from 0).

        Raises:
            ValueError: ``batch`` is not an int >= 0 (numpy's integers are ints).
        """
        batch = as_int(batch)
        if not int_at_least(batch, 0):
            raise ValueError(f"batch must be an int >= 0 (a batch's index), not {batch!r}")
        step = self.steps[bisect.bisect_right(self.steps, (batch, math.inf, math.inf)) - 1]
        return step[1], step[2]

    @classmethod
    def warmup(
        cls,
        start: int,
        end: int,
        *,
        tokens: int,
        batches: int,
        stages: int = 4,
        ramp: Literal["linear", "geometric"] = "linear",
        multiple: int = 64,
    ) -> Schedule:
        """A sequence-length warm-up at a constant number of ids per batch: ``seq_len`` goes
        from ``start`` to ``end`` in ``stages`` steps evenly spaced over ``batches`` batches
        (the last, at ``end``, from batch ``batches`` on), each batch ``tokens // seq_len``
        rows (so ``tokens`` ids when ``seq_len`` divides it, as powers of two do).

        Args:
            start: The first ``seq_len``.
            end: The last ``seq_len`` (at most ``tokens``).
            tokens: Ids a batch predicts.
            batches: The batch the last step begins at.
            stages: Steps from ``start`` to ``end`` (2 or more; consecutive equal lengths
                merge).
            ramp: ``linear`` (equal steps of length) or ``geometric`` (equal ratios:
                ``Schedule.warmup(64, 1024, stages=3, ramp="geometric", ...)`` is 64, 256,
                1024).
            multiple: The lengths between ``start`` and ``end`` are rounded to a multiple of
                it (1: not rounded).

        Raises:
            ValueError: a size below 1, ``start`` > ``end``, ``end`` > ``tokens``, fewer than
                2 stages, ``batches`` < ``stages - 1``, an unknown ramp, or ``tokens`` past
                ``MOST_IDS`` (the ids a batch holds at most).
        """
        start, end, tokens, batches, stages, multiple = map(
            as_int, (start, end, tokens, batches, stages, multiple)
        )
        for name, value in (
            ("start", start), ("end", end), ("tokens", tokens), ("batches", batches),
            ("multiple", multiple),
        ):  # fmt: skip
            if not countable(value, 1):
                raise ValueError(f"{name} must be an int from 1 to {MOST_INT}, not {value!r}")
        if tokens > MOST_IDS:
            raise ValueError(f"tokens must be at most {MOST_IDS} (a batch's ids), not {tokens}")
        if not int_at_least(stages, 2) or batches < stages - 1:
            raise ValueError(f"stages must be an int from 2 to batches + 1, not {stages!r}")
        if not start <= end <= tokens:
            raise ValueError(f"need start <= end <= tokens, not {start}, {end}, {tokens}")
        if ramp not in ("linear", "geometric"):
            raise ValueError(f"ramp must be 'linear' or 'geometric', not {ramp!r}")
        steps: list[tuple[int, int, int]] = []
        for k in range(stages):
            f = k / (stages - 1)
            length = start + (end - start) * f if ramp == "linear" else start * (end / start) ** f
            seq_len = min(end, max(start, multiple * round(length / multiple)))
            seq_len = start if k == 0 else end if k == stages - 1 else seq_len
            if (steps and steps[-1][1] == seq_len) or (0 < k < stages - 1 and seq_len == end):
                continue  # (merged; ``end`` only from ``batches`` on, though a stage rounds to it)
            steps.append((k * batches // (stages - 1), seq_len, max(1, tokens // seq_len)))
        return cls(steps)


def schedule_of(
    seq_len: int | None, batch_size: int | None, schedule: Schedule | Iterable[Sequence[int]] | None
) -> Schedule:
    """The schedule of ``Loader.batches``' arguments: fixed sizes, or a schedule (a table of
    steps is made a ``Schedule``), never both.

    Raises:
        ValueError: both or neither given, or a bad size or step.
    """
    if schedule is not None:
        if seq_len is not None or batch_size is not None:
            raise ValueError("give seq_len and batch_size, or a schedule, not both")
        return schedule if isinstance(schedule, Schedule) else Schedule(schedule)
    if seq_len is None or batch_size is None:
        raise ValueError("batches need seq_len and batch_size, or a schedule")
    seq_len, batch_size = as_int(seq_len), as_int(batch_size)
    check_sizes(seq_len, batch_size)
    return Schedule([(0, seq_len, batch_size)])


#: The most ids a batch holds (``seq_len * batch_size``): 2**31, 16 GiB of int64.
MOST_IDS = 1 << 31


def check_sizes(seq_len: int, batch_size: int) -> None:
    """Refuse a ``seq_len`` or ``batch_size`` that is not an int >= 1, or a batch of more
    than ``MOST_IDS`` ids (``ValueError``)."""
    for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if not int_at_least(value, 1):
            raise ValueError(f"{name} must be an int >= 1, not {value!r}")
    if seq_len * batch_size > MOST_IDS:
        raise ValueError(f"a batch of seq_len={seq_len} x batch_size={batch_size} ids is more "
                         f"than the {MOST_IDS} a batch holds at most")  # fmt: skip


def _described(schedule: Schedule) -> str:
    if len(schedule.steps) == 1:
        _, seq_len, batch_size = schedule.steps[0]
        return f"seq_len={seq_len}, batch_size={batch_size}"
    return f"schedule={list(schedule.steps)}"


def saved_schedule(state: BatchesState) -> Schedule:
    """The schedule ``state`` was saved under.

    Raises:
        StateError: a step of more ids than a batch holds (each size a count: the record took
            it), naming it.
    """
    steps = state.steps
    for k, (_, seq_len, batch_size) in enumerate(steps):
        try:
            check_sizes(seq_len, batch_size)
        except ValueError as exc:
            field = f"schedule.changes[{k - 1}]" if k else "seq_len"
            raise StateError(f"bad batches state: {exc}", field) from None
    return Schedule(steps)


def check_schedule(state: BatchesState, schedule: Schedule) -> None:
    """Refuse a state saved under another schedule, naming both.

    Raises:
        StateError: the schedules differ (fixed sizes are a one-step schedule).
    """
    saved = saved_schedule(state)
    if saved != schedule:
        (_, seq_len, batch_size), now = saved.steps[0], schedule.steps[0]
        field = "seq_len" if seq_len != now[1] else "batch_size" if batch_size != now[2] else None
        raise StateError(f"the state was saved for {_described(saved)}; now "
                         f"{_described(schedule)}", field or "schedule", mismatch=True)  # fmt: skip


class Cursor:
    """Where a run is in its schedule: the shape of the next batch, moved on per batch."""

    def __init__(self, schedule: Schedule, start: BatchesState | None = None) -> None:
        self.schedule = schedule
        at = 0
        if start is not None:
            at = start.batches if start.scheduled is None else start.scheduled.at
        self.at = at
        """Batches of the schedule before the next."""
        self.seq_len, self.batch_size = schedule.shape(at)

    def advance(self) -> None:
        """One batch handed out: the next one's shape."""
        self.at += 1
        self.seq_len, self.batch_size = self.schedule.shape(self.at)

    @property
    def fixed(self) -> bool:
        """One shape for the whole run."""
        return len(self.schedule.steps) == 1

    def first(self) -> tuple[int, int]:
        """The first step's ``(seq_len, batch_size)``, as a state records them."""
        return self.schedule.steps[0][1], self.schedule.steps[0][2]

    def section(self, packings: tuple[Packed, ...] = ()) -> Scheduled | msgspec.UnsetType:
        """A state's schedule section here (none for fixed sizes)."""
        if self.fixed:
            return msgspec.UNSET
        changes = tuple(Step(*step) for step in self.schedule.steps[1:])
        return Scheduled(changes, self.at, packings)
