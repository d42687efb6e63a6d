"""The states given to a reshard, parsed and checked as one run's before anything is made of
them: each one a state (``check_is_state``), decoded as its record with a refusal naming
which (``decode_each``), batches states of one packing, size and schedule, each checked
against its run (``parse_batches``); and the schedule the new ranks go on in
(``new_schedule``). ``mixreshard.reshard`` and ``resharding.reshard_states`` read them.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from msgspec import UNSET, UnsetType

from openwebtext.codec import Record
from openwebtext.errors import StateError
from openwebtext.stream.schema import (
    BATCHES_FORMAT,
    STATE_FORMAT,
    BatchesState,
    Scheduled,
    kind_of,
)
from openwebtext.stream.shapes import saved_schedule

__all__ = ["check_is_state", "decode_each", "new_schedule", "parse_batches"]


R = TypeVar("R", bound=Record)


def decode_each(states: Sequence[Any], cls: type[R]) -> list[R]:
    """Each of the states given to ``reshard`` as record ``cls``: a refusal says which one
    (``state 1: …``), its ``field`` the path in that state."""
    out = []
    for k, state in enumerate(states):
        try:
            out.append(cls.from_json(state))
        except StateError as exc:
            raise exc.retold(f"state {k}: {exc}") from None
    return out


def check_is_state(k: int, state: Any) -> None:
    """State ``k`` given to a reshard is a state (of documents or batches, of any kind), checked
    before anything else is read of it.

    Raises:
        StateError: naming the state (``field``: ``format``, when it has one of no state).
    """
    if not isinstance(state, Mapping):
        raise StateError(f"state {k} is {type(state).__name__}, not a state")
    if kind_of(state) is None:
        found = state.get("format")
        raise StateError(f"bad state: format: state {k}'s is not a state's (found "
                         f"{reprlib.repr(found)})", field="format")  # fmt: skip


def parse_batches(
    states: Sequence[Mapping[str, Any]], runs: bool = True
) -> list[BatchesState] | None:
    """The states as batches states (of one packing and size), or None for document states;
    ``runs``: each checked against its run (``BatchesState.check_run``; not a mixture's part's
    view of its batches, which its ``reshard`` builds)."""
    kinds = set()
    for k, state in enumerate(states):
        check_is_state(k, state)
        kinds.add(state["format"])
    if kinds == {STATE_FORMAT}:
        return None
    if kinds != {BATCHES_FORMAT}:
        raise StateError(
            f"cannot reshard states of formats {sorted(map(str, kinds))}: give the states of "
            f"every rank's document iterator ({STATE_FORMAT!r}) or of every rank's batches "
            f"({BATCHES_FORMAT!r})"
        )
    parsed = decode_each(states, BatchesState)
    for k, batches in enumerate(parsed if runs else ()):  # (as batches started from it do)
        try:
            batches.check_run()
        except StateError as exc:
            raise exc.retold(f"state {k}: {exc}") from None
    packings = {(b.packing, b.window if b.packing == "bestfit" else None) for b in parsed}
    if len(packings) > 1:
        field = "packing" if len({p for p, _ in packings}) > 1 else "window"
        raise StateError(f"batches states of different (packing, window): {sorted(packings)}",
                         field)  # fmt: skip
    sizes = {(b.seq_len, b.batch_size) for b in parsed}
    if len(sizes) > 1:
        field = "seq_len" if len({t for t, _ in sizes}) > 1 else "batch_size"
        raise StateError(f"batches states of different (seq_len, batch_size): {sorted(sizes)}",
                         field)  # fmt: skip
    schedules = {saved_schedule(b).steps for b in parsed}
    if len(schedules) > 1:
        raise StateError(f"batches states of different schedules: {sorted(schedules)}",
                         "schedule")  # fmt: skip
    return parsed


def new_schedule(states: Sequence[BatchesState]) -> Scheduled | UnsetType:
    """The new ranks' schedule section: the old ranks' schedule, from the batch the furthest
    of them had reached (none for fixed sizes)."""
    sections = [s.scheduled for s in states]
    if sections[0] is None:
        return UNSET
    at = max(s.at for s in sections if s is not None)
    return Scheduled(sections[0].changes, at)
