"""Resharding: the states of all ranks of a run, turned into one state per rank of another
world size (``reshard_states``; ``mixreshard.reshard`` is the door), so that a job preempted on W
GPUs resumes exactly on W'.

Nothing is read here: a new state names the old ranks' positions and this rank's share of
what they left (``stream.rest`` cuts the shares when the stream starts, with the document
counts). The section is O(old ranks) integers, never a list of documents.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, TypeAlias, cast

from openwebtext.codec import differing, replace
from openwebtext.errors import StateError
from openwebtext.options import MOST_INT, Options, as_int, countable, int_at_least
from openwebtext.plan import Rule
from openwebtext.stream.epochrests import at_start, epoch_sections
from openwebtext.stream.given import decode_each, new_schedule, parse_batches
from openwebtext.stream.schema import (
    BatchesState,
    Counters,
    DocumentState,
    MixtureState,
    Position,
    StreamConfig,
)
from openwebtext.stream.sections import NOT_ACROSS, Begun, Reshard, WindowAt

__all__ = ["KEEP", "reshard_states"]

#: ``reshard(even=KEEP)``: the new ranks keep the run's own rule.
KEEP: Literal["keep"] = "keep"
Even: TypeAlias = Rule | Literal["keep"] | None



def reshard_states(
    states: Sequence[Mapping[str, Any]], world_size: int, *, even: Even = KEEP,
    replays: Sequence[int] | None = None, part: bool = False,
    ranks: Sequence[int] | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """``reshard`` (the states of the new ``ranks``, as ``new_ranks`` gives them: None, all
    of them), and for a mixture's ``part`` (the states its ``reshard`` builds) the windows
    each old rank had dealt to it not finished (``replays``: its part's documents cannot say
    which, ``WindowAt.replays``)."""
    world_size = as_int(world_size)
    ranks = new_ranks(world_size) if ranks is None else ranks
    if not states:
        raise StateError("nothing to reshard: no state given")
    batches = parse_batches(states, runs=not part)
    documents = (
        [_of_corpus(b.documents) for b in batches]
        if batches
        else decode_each(states, DocumentState)
    )
    inside = "documents" if batches else ""  # (a batches state's fields: of it)
    with _within(inside):
        old_world, by_rank = _by_rank([d.config for d in documents])
        _same_run([d.config for d in documents], by_rank)
    ordered = [documents[by_rank[r]] for r in range(old_world)]
    first = ordered[0]
    fit = _best_fit(batches, by_rank, old_world, replays) if batches else None
    low = min(d.position.epoch for d in ordered)  # (resharded again: at most the next's start)
    if fit and any(d.reshard for d in ordered) and any(
        d.position.epoch > low and (w.rows or not at_start(d, low + 1, 0))
        for d, w in zip(ordered, fit[1], strict=True)
    ):
        raise StateError(_different_epochs(ordered, "best-fit batches states resharded again"))
    cuts = [batches[by_rank[r]].cut if batches and fit is None else 0 for r in range(old_world)]
    # (where each cut's document lies: past the slots skipped before it, or in the next epoch)
    wheres = [(0, 0)] * old_world
    if batches and fit is None:
        wheres = [(b.cut_slots or 0, b.cut_next or 0) if b.cut else (0, 0)
                  for b in (batches[by_rank[r]] for r in range(old_world))]  # fmt: skip
    begun = (
        {d.position.epoch for d, w in zip(ordered, fit[1], strict=True) if w.rows} if fit else set()
    )
    with _within(inside):
        base, *later = epoch_sections(ordered, cuts, old_world, begun, wheres)
    if any(d.reshard for d in ordered) and (base.window is not None) != (fit is not None):
        raise StateError(
            "batches states of different packings: the resharded epoch was packed "
            f"{'by best fit' if base.window is not None else 'end to end'}"
        )
    if fit is not None:
        base, later = _best_fit_sections(base, later, ordered, fit)
    base = replace(base, later=tuple(later))
    rule = _new_rule(even, first.config.even, old_world)
    if world_size == 1:  # one share is even by itself
        rule = None
    out = []
    for new in ranks:
        config = replace(first.config, rank=new, world_size=world_size, even=rule)
        section = replace(base, share=(new, world_size), rule=rule, counted=False)
        state = DocumentState(config, Position(base.epoch), Counters(), section, until=first.until)
        if not batches:
            out.append(state.to_json())
            continue
        like, shape = batches[0], new_schedule(batches)
        if fit is None:
            packed = BatchesState(like.seq_len, like.batch_size, state, schedule=shape)
        else:  # (made whole: a rest's window is the batches')
            assert base.next_window is not None
            packed = BatchesState(like.seq_len, like.batch_size, state, schedule=shape,
                                  packing="bestfit", window=fit[0], window_number=base.next_window,
                                  window_epoch=base.epoch)  # fmt: skip
        out.append(packed.to_json())
    return out


def new_ranks(world_size: int, rank: Any = None) -> Sequence[int]:
    """The new ranks a reshard makes states for: all of ``world_size``, or ``rank``.

    Raises:
        ValueError: ``world_size`` is not an int from 1 to ``MOST_INT``, or ``rank`` (given)
            not one of its ranks.
    """
    if not countable(world_size, 1):  # (as Options: a state says it)
        raise ValueError(f"world_size must be an int >= 1 and at most {MOST_INT}, not "
                         f"{world_size!r}")  # fmt: skip
    if rank is None:
        return range(world_size)
    rank = as_int(rank)
    if not int_at_least(rank, 0) or rank >= world_size:
        raise ValueError(f"rank must be an int from 0 to world_size - 1 ({world_size - 1}), "
                         f"not {rank!r}")  # fmt: skip
    return (rank,)


def _new_rule(even: Even, old: Rule | None, old_world: int) -> Rule | None:
    """The new ranks' rule for ``reshard(even=…)``: ``keep`` of a one-rank run (whose rule in
    force is None: one share is even by itself) is ``Options``' default rule, the one the new
    ranks' ``Loader`` has unless told otherwise."""
    if even == KEEP:
        return old if old_world > 1 else Options().even
    if even not in ("drop", "pad", None):
        raise ValueError(f"even must be 'drop', 'pad', None or 'keep', not {even!r}")
    return even


def _of_corpus(state: DocumentState | MixtureState) -> DocumentState:
    """The documents' state of batches of a corpus (a mixture's: ``mixreshard.reshard``)."""
    if isinstance(state, MixtureState):
        raise StateError("batches of a mixture are resharded by openwebtext.reshard")
    return state


@contextlib.contextmanager
def _within(prefix: str) -> Iterator[None]:
    """A ``StateError`` of the documents a batches state holds, named under ``prefix``."""
    try:
        yield
    except StateError as exc:
        if not (prefix and exc.field):
            raise
        raise exc.retold(str(exc), f"{prefix}.{exc.field}") from None


def _best_fit(
    states: Sequence[BatchesState], by_rank: Mapping[int, int], world: int,
    replays: Sequence[int] | None,
) -> tuple[int, list[WindowAt]] | None:  # fmt: skip
    """Best-fit batches: the window size, and each old rank's window (number, rows of it
    handed out, packings; a mixture's part: its documents in it, and the windows dealt to the
    rank not finished, ``replays``); None for concat batches."""
    if states[0].packing != "bestfit":
        return None
    window = states[0].window
    assert window is not None  # a best-fit state has one (``BatchesState.from_json``)
    ordered = [states[by_rank[r]] for r in range(world)]
    for rank, s in enumerate(ordered):  # a window begun at an epoch's end is the next one's
        epoch = cast(DocumentState, s.documents).position.epoch
        if s.row and s.window_epoch is not None and s.window_epoch > epoch:
            raise StateError(
                f"rank {rank}'s best-fit window is of epoch {s.window_epoch}, begun when its "
                f"documents were at the end of epoch {epoch}: reshard best-fit batches states "
                "taken in one epoch (resume this one on the same world size)"
            )
    numbers = [
        WindowAt(s.window_number, s.row, () if s.scheduled is None else s.scheduled.packings,
                 s.window_parts[0] if s.window_parts and s.row else None,  # (a mixture's part)
                 s.window_repeats or 0, replays=None if replays is None else replays[by_rank[r]],
                 slots=s.window_slots[0] if s.window_slots and s.row else None,
                 across=s.window_next[0] if s.window_next and s.row else NOT_ACROSS)
        for r, s in enumerate(ordered)]  # fmt: skip
    return window, numbers


def _by_rank(configs: Sequence[StreamConfig]) -> tuple[int, dict[int, int]]:
    """The old world size, and the index of each rank's state; refuse gaps and doubles."""
    worlds = {c.world_size for c in configs}
    if len(worlds) > 1:
        raise StateError(f"states of different runs: world sizes {sorted(worlds)}",
                         "config.world_size")  # fmt: skip
    world = next(iter(worlds))
    by_rank: dict[int, int] = {}
    for k, config in enumerate(configs):
        rank = config.rank
        if rank in by_rank:
            raise StateError(
                f"two states of rank {rank} (states {by_rank[rank]} and {k}): give each "
                "rank's state once", "config.rank"
            )
        by_rank[rank] = k
    missing = sorted(set(range(world)) - set(by_rank))
    if missing:
        raise StateError(
            f"ranks missing: {missing} of world_size {world} (got {len(by_rank)} states): "
            "resharding needs the state of every rank", "config.rank"
        )
    return world, by_rank


def _same_run(configs: Sequence[StreamConfig], by_rank: Mapping[int, int]) -> None:
    reference = replace(configs[by_rank[0]], rank=0)
    for rank, k in sorted(by_rank.items()):
        other = replace(configs[k], rank=0)
        keys = differing(reference, other)
        differ = [
            f"{key}: rank 0 {getattr(reference, key)!r}, rank {rank} {getattr(other, key)!r}"
            for key in keys
        ]
        if differ:  # (the field of the first: ``config.units``; its state: the message's)
            raise StateError(f"states of different runs (state {k}, of rank {rank}, differs from"
                             f" rank 0's): " + "; ".join(differ), f"config.{keys[0]}")  # fmt: skip


#: The most epochs an old rank that handed out nothing may be past the earliest one (its shares
#: all empty): a section is written for each epoch between.
def _best_fit_sections(
    base: Reshard, later: Sequence[Reshard], ordered: Sequence[DocumentState],
    fit: tuple[int, list[WindowAt]],
) -> tuple[Reshard, list[Reshard]]:  # fmt: skip
    """The sections with the best-fit windows old ranks had begun, each to be packed again:
    each in the section of its rank's epoch (a mixture's part: its ranks may be in different
    epochs of it; the first section's rest hands them all out first), or in this world's level
    of a resharded epoch (states of one epoch only, or at the very start of the next with no
    row of it handed out). A corpus's windows are seeded by their epoch: one epoch only."""
    window, numbers = fit
    resharded = any(d.reshard is not None for d in ordered)
    part = all(w.documents is not None for w in numbers if w.rows)
    # (states resharded again in different epochs: refused before the sections are made)
    if later and resharded and part:  # (rests of other epochs an earlier reshard left)
        raise StateError(
            f"the states still have rests of epochs {[s.epoch for s in later]} to hand out after "
            f"epoch {base.epoch}'s (an earlier reshard left them: a small part's ranks were in "
            "different epochs of it): best-fit batches states resharded again are resharded once "
            "those are out; resume them on this world size until then, or reshard concat batches "
            "or documents"
        )
    if (later and (resharded or not part)) or any(
        d.position.epoch > base.epoch and w.rows and not part
        for d, w in zip(ordered, numbers, strict=True)
    ):
        what = "best-fit batches states resharded again" if resharded else "best-fit batches states"
        raise StateError(_different_epochs(ordered, what))
    next_window = 1 + max(w.number for w in numbers)  # the new ranks' own: past every old one
    if not resharded:
        sections = [replace(s, window=window, windows=(), next_window=next_window)
                    for s in (base, *later)]  # fmt: skip
        for r, (d, w) in enumerate(zip(ordered, numbers, strict=True)):
            k = d.position.epoch - base.epoch
            if w.rows:
                dealt = Begun(w.number, w.rows, w.packings, w.documents, w.repeats, w.slots,
                              w.across, rank=r)
                sections[k] = replace(sections[k], windows=(*(sections[k].windows or ()), dealt))
        return sections[0], sections[1:]
    if window != base.window:
        raise StateError(f"best-fit windows of {window} documents, resharded with {base.window}")
    crossing = [b.rank for b in base.windows or () if b.across.ends]
    if crossing:  # (dealt again with a level: ``rest._window_slots`` refuses it, at every open)
        raise StateError(
            f"old rank {crossing[0]}'s best-fit window crosses its part's epoch end, in states "
            "resharded again, which a reshard does not follow: resume these states on their "
            "world size until that window is out, then reshard (or reshard concat batches or "
            "documents)"
        )
    level = replace(base.levels[-1], windows=tuple(numbers))
    return replace(base, levels=(*base.levels[:-1], level), next_window=next_window), []


def _different_epochs(ordered: Sequence[DocumentState], what: str) -> str:
    epochs = {r: d.position.epoch for r, d in enumerate(ordered)}
    return (
        f"states of different epochs (rank: epoch {epochs}): {what} are resharded only when "
        "taken in one epoch (or at the very start of the next); resume them on the same world "
        "size, or reshard concat batches or documents"
    )
