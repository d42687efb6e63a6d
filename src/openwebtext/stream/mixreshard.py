"""``reshard``: the states of every rank of a run made into states for another world size,
for a single corpus's stream or batches (``resharding.reshard_states``) and for a mixture's
(each part's resharded as a corpus's, the mixture's turns from old rank 0's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast, overload

from msgspec import UNSET, UnsetType

from openwebtext.codec import differing, replace
from openwebtext.errors import StateError
from openwebtext.options import as_int
from openwebtext.stream.given import check_is_state, decode_each, new_schedule, parse_batches
from openwebtext.stream.resharding import KEEP, Even, new_ranks, reshard_states
from openwebtext.stream.schema import (
    BatchesState,
    Change,
    DocumentState,
    MixtureState,
    Replay,
    kind_of,
)

__all__ = ["reshard"]


@overload
def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = ..., rank: None = ...
) -> list[dict[str, Any]]: ...
@overload
def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = ..., rank: int
) -> dict[str, Any]: ...
def reshard(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = KEEP,
    rank: int | None = None,
) -> list[dict[str, Any]] | dict[str, Any]:  # fmt: skip
    """One state per rank of ``world_size`` from the states of every rank of a run (with
    ``rank``, that rank's only).

    ``states`` are the ``state_dict()`` of every rank's document iterator, or of every rank's
    ``Loader.batches`` (one kind), each taken at that rank's own position, in any order. State
    ``r`` of the result resumes ``Loader(..., rank=r, world_size=world_size)``
    (``.iter(state=…)`` or ``.batches(..., state=…)``): the old ranks' documents up to their
    states, plus what the new ranks hand out to the end of that epoch, are the epoch's documents
    once each. Every new rank hands out the same number: under ``even="drop"`` the last few of
    the rest are left out (``stats.dropped_documents``, on the last rank), under ``"pad"`` the
    first few are repeated (``stats.repeated_documents``); without even sharding the shares
    differ by at most one. What the old ranks' own even shares left out or repeat (of ranks that
    had not finished the epoch, which count theirs) is counted on the last new rank too, so that
    the counts over all ranks are the run's. With concat batches, a document cut across the
    checkpoint goes on from its first id not yet a target; with best-fit batches, the window
    each old rank was in is packed again by one new rank (round robin), which hands out only the
    rows not handed out before. States may be in different epochs (a mixture's small part runs
    through its epochs at each rank's pace): a rank past an epoch had finished it, a rank before
    one had not begun it, and the rests of every epoch an old rank had begun follow one another
    (best-fit batches of a corpus: states of one epoch only, or at the very start of the next
    with no row of it out; of a mixture, each old rank's window is read from its epoch of each
    part, and past its end from the next, all handed out first). After those, every epoch is the
    new world size's own, and so is an epoch no old rank had begun (all at its very start: the
    new states are at the end of an empty rest of the epoch before it); a rank whose share is
    empty passes a finite run's epochs with no document (at most 65,536 past the earliest
    rank's: a section is written for each epoch between). The new ranks' counters start at 0.
    States of a resharded epoch can be resharded again. Batches under a ``Schedule`` go on in it
    from the batch the furthest old rank had reached (best fit: a window packed again at a
    change is packed the same way by the new rank it is dealt to).

    A mixture's states (of its documents, or of its batches) are resharded part by part, each
    as a corpus's, each new rank with the weights in force on old rank 0 (and its schedule
    position); the proportions count again from the reshard. A document a concat batch had
    begun goes on in its part, first on the new rank whose share of the part begins with it;
    a best-fit window an old rank had begun is replayed by one new rank.

    Args:
        states: The states of all ranks of one run.
        world_size: The new number of ranks.
        even: How the new ranks are evened out: ``"drop"``, ``"pad"``, None (not evened
            out), or ``"keep"`` (the default: the run's own rule; a run of one rank, which
            has none in force, gets ``Loader``'s default, ``"drop"``). The new ranks'
            ``Loader`` must say the same (``even=``): a state that disagrees is refused
            with the argument to pass.
        rank: Make that new rank's state only, and return it (not a list): what each rank
            of a large job calls with every old state. Each new state holds what it needs of
            every old rank's, so all of them cost old ranks × new ranks in time and memory
            (2,000 → 2,000 ranks: 1.6 s and 0.8 GB); one costs old ranks.

    Raises:
        StateError: a state is not a state, ranks are missing or given twice, the states
            are of different runs, epochs, batch sizes or schedules; the message names what.
        ValueError: ``world_size`` is not an int >= 1, or ``rank`` not one of its ranks.
    """
    if isinstance(states, str | bytes | Mapping) or not isinstance(states, Iterable):
        raise TypeError(f"states must be a list of every rank's state_dict(), not {states!r}")
    states, world_size = list(states), as_int(world_size)  # (a generator: read once)
    ranks = new_ranks(world_size, rank)  # (first: a bad world size or rank, before the states)
    made = _reshard(states, world_size, even, ranks)
    return made if rank is None else made[0]


def _reshard(
    states: list[Mapping[str, Any]], world_size: int, even: Even, ranks: Sequence[int]
) -> list[dict[str, Any]]:
    """``reshard``: the states of ``ranks`` (of ``world_size``) in a list."""
    for k, given in enumerate(states):  # each a state first, whatever the others are
        check_is_state(k, given)
    mixtures = [_is_mixture(s) for s in states]
    if not states or not any(mixtures):
        return reshard_states(states, world_size, even=even, ranks=ranks)
    if any(_of_corpus(s) for s in states):  # (documents of no state: decoded, said below)
        raise StateError("states of a mixture and of a single corpus cannot be resharded together")
    if len({_batches(s) for s in states}) > 1:
        raise StateError("states of a mixture's documents and of its batches given together")
    batches = parse_batches(states) if _batches(states[0]) else None
    parsed = (
        decode_each(states, MixtureState)
        if batches is None
        else [cast(MixtureState, b.documents) for b in batches]  # (each read once)
    )
    first = min(parsed, key=lambda s: next(iter(s.parts.values())).config.rank)
    for s in parsed:
        if s.config != first.config:
            differ = "; ".join(f"{key}: {getattr(first.config, key)!r} and "
                               f"{getattr(s.config, key)!r}"
                               for key in differing(first.config, s.config))  # fmt: skip
            raise StateError(f"the states are of different mixtures: {differ}")
    names = first.config.parts
    if batches is not None and batches[0].packing == "bestfit":
        return _reshard_best_fit(batches, parsed, world_size, even, ranks)

    def part_states(index: int, name: str) -> list[dict[str, Any]]:
        if batches is None:
            return [s.parts[name].to_json() for s in parsed]
        out = []
        for b, m in zip(batches, parsed, strict=True):
            if b.offset and m.next is None:
                raise StateError("a concat batches state of a mixture begun inside a document "
                                 "must name its part (documents.next)")  # fmt: skip
            mine = m.next == index  # (its cut: where its document lies in the part)
            part = BatchesState(b.seq_len, b.batch_size, m.parts[name],
                                b.offset if mine else 0, b.batches if mine else 0,
                                cut_slots=b.cut_slots if mine else UNSET,
                                cut_next=b.cut_next if mine else UNSET)  # fmt: skip
            out.append(part.to_json())
        return out

    new_parts = {}
    for i, name in enumerate(names):
        try:
            new_parts[name] = reshard_states(part_states(i, name), world_size, even=even,
                                             part=True, ranks=ranks)  # fmt: skip
        except StateError as exc:  # (its field: the part's, inside the mixture's state)
            at = f"parts.{name}" if batches is None else f"documents.parts.{name}"
            raise exc.within(at, f"the mixture's part {name!r}: ") from None
    out = []
    for k in range(len(ranks)):
        each = {
            name: DocumentState.from_json(
                new_parts[name][k]["documents"] if batches else new_parts[name][k]
            )
            for name in names
        }
        state = MixtureState(first.config, each, first.handed, first.weights,
                             (0,) * len(names), first.changes, until=first.until)  # fmt: skip
        if batches is None:
            out.append(state.to_json())
            continue
        like = batches[0]
        fresh = BatchesState(like.seq_len, like.batch_size, state, schedule=new_schedule(batches))
        out.append(fresh.to_json())
    return out


def _reshard_best_fit(
    batches: Sequence[BatchesState], parsed: Sequence[MixtureState], world: int, even: Even,
    new: Sequence[int],
) -> list[dict[str, Any]]:  # fmt: skip
    """Best-fit batches of a mixture, resharded: each part's states as a corpus's best-fit
    batches, the window an old rank had begun holding its documents of that part
    (``window_parts``; in the slots ``window_slots`` says, where skips lie among them); the
    new rank each window is dealt to (round robin, as every part deals it) replays the old
    rank's turns from the window's start (``Replay``), so that it packs the same documents in
    the same order into the same rows and hands out those not handed out. Its own turns start
    after them, where old rank 0's would after the window of its own it had begun
    (``_after_window``: its position and the weights in force there)."""
    ranks = [next(iter(m.parts.values())).config.rank for m in parsed]
    order = sorted(range(len(batches)), key=ranks.__getitem__)
    batches, parsed = [batches[k] for k in order], [parsed[k] for k in order]
    names = parsed[0].config.parts
    replays: list[Replay] = []
    for rank, (b, m) in enumerate(zip(batches, parsed, strict=True)):
        pending = list(m.replays or ())  # windows dealt to it not finished (a reshard's)
        if pending and b.row:  # the first under way: its rows handed out go on from here
            packings = pending[0].packings if b.scheduled is None else b.scheduled.packings
            pending[0] = replace(pending[0], rows=b.row, packings=packings)
        replays += pending
        if pending or not b.row:
            continue
        assert b.window_parts  # (a mixture's window with rows out counts them: ``check``)
        packings = () if b.scheduled is None else b.scheduled.packings
        replays.append(Replay(rank, m.handed, m.weights, m.served, b.window_parts,
                              sum(b.window_parts), b.window_number, b.row,
                              m.changes, packings))  # fmt: skip
    new_parts = {}
    unfinished = [len(m.replays or ()) for m in parsed]
    for i, name in enumerate(names):
        states = [
            replace(b, documents=m.parts[name], packed_parts=UNSET,
                    window_parts=(b.window_parts[i],) if b.window_parts else UNSET,
                    window_slots=_part_slots(b, i),
                    window_next=(b.window_next[i],) if b.window_next and b.window_next[i].ends
                    else UNSET).to_json()
            for b, m in zip(batches, parsed, strict=True)
        ]  # fmt: skip
        try:
            new_parts[name] = reshard_states(states, world, even=even, replays=unfinished,
                                             part=True, ranks=new)  # fmt: skip
        except StateError as exc:  # (as concat's: its field, the part's in the batches state)
            raise exc.within(f"documents.parts.{name}", f"the mixture's part {name!r}: ") from None
    first = parsed[0]
    handed, weights, changes = _after_window(batches[0], first)
    out = []
    for k, rank in enumerate(new):
        each = {name: _left_out(DocumentState.from_json(new_parts[name][k]["documents"]),
                                [m.parts[name] for m in parsed]) for name in names}  # fmt: skip
        dealt = tuple(replays[rank::world])
        state = MixtureState(first.config, each, handed, weights, (0,) * len(names), changes,
                             replays=dealt or UNSET, until=first.until)  # fmt: skip
        like = BatchesState.from_json(new_parts[names[0]][k])  # (its window number: past all)
        out.append(replace(like, documents=state, window_epoch=batches[0].window_epoch).to_json())
    return out


def _part_slots(batches: BatchesState, part: int) -> tuple[int] | UnsetType:
    """A part's ``window_slots`` in its state resharded: the slots its documents in the window
    lie in, where some of it were skipped among them (what its share deals; absent: none)."""
    slots, counts = batches.window_slots, batches.window_parts
    if not slots or not counts or slots[part] == counts[part]:
        return UNSET
    return (slots[part],)


def _after_window(
    batches: BatchesState, mixture: MixtureState
) -> tuple[int, tuple[float, ...], tuple[Change, ...]]:
    """Where old rank 0 is after the best-fit window of its own it had begun (its state is at
    the window's start; the window's documents were its turns, handed out by the new rank it
    is dealt to): the documents it has handed out, the weights in force before the next one
    (the schedule's steps and the changes due inside the window applied; one due there is
    applied by the new ranks) and the changes not applied. The new ranks' own turns start
    there, as the old rank's would (a window dealt to it is an older rank's turns, not its)."""
    handed, weights, changes = mixture.handed, mixture.weights, mixture.changes
    if mixture.replays or not batches.row:
        return handed, weights, changes
    end = handed + sum(batches.window_parts or ())
    steps = [(c.at, 0, c.weights) for c in mixture.config.schedule if handed <= c.at < end]
    due = [(max(c.at, handed), 1, c.weights) for c in changes if c.at < end]
    events = sorted(steps + due, key=lambda e: e[:2])  # (at one position: step, then changes)
    if events:
        weights = events[-1][2]
    return end, weights, tuple(c for c in changes if c.at >= end)


def _left_out(state: DocumentState, old: Sequence[DocumentState]) -> DocumentState:
    """A part's new ``state`` whose epoch was, on the old ranks, a rest that only leaves out
    the documents of windows a crossing carried into it (``Reshard.dealt``: they were handed
    out in an earlier epoch's rest), resharded again: still so (a level's shares never held
    them), though a section resharded leaves its old ranks' say (``Reshard.base``)."""
    section = state.reshard
    if section is None or not any(
        d.reshard is not None and d.reshard.dealt and d.position.epoch == section.epoch
        for d in old
    ):
        return state
    return replace(state, reshard=replace(section, dealt=True))



def _batches(state: Mapping[str, Any]) -> bool:
    return kind_of(state) is BatchesState


def _of_corpus(state: Mapping[str, Any]) -> bool:
    """A single corpus's state, or the state of its batches."""
    inner = state.get("documents") if _batches(state) else state
    return kind_of(inner) is DocumentState


def _is_mixture(state: Any) -> bool:
    """A mixture's state, or the state of a mixture's batches (not checked here)."""
    if not isinstance(state, Mapping):
        return False
    inner = state.get("documents") if _batches(state) else state
    return kind_of(inner) is MixtureState
