"""The sections of each epoch's rest a reshard writes (``reshard_states``), from the old
ranks' states: one per epoch from the earliest one an old rank is in, each the old ranks at
their states (``OldRank``) or, where an earlier reshard had cut the epoch, one level more
(``Level``). The states must say one run: each rank's view of an epoch's sections agrees."""

from __future__ import annotations

from collections.abc import Sequence

from openwebtext.codec import replace
from openwebtext.errors import StateError
from openwebtext.stream.schema import DocumentState, Position
from openwebtext.stream.sections import Level, OldRank, Reshard

__all__ = ["at_start", "epoch_sections"]

_MOST_APART = 1 << 16


def epoch_sections(
    ordered: Sequence[DocumentState],
    cuts: Sequence[int],
    world: int,
    needed: set[int],
    wheres: Sequence[tuple[int, int]],
) -> list[Reshard]:
    """The sections of the rests to hand out, one per epoch from the earliest one an old rank
    is in: every epoch an old rank had begun (a mixture's small part runs through its epochs
    at each rank's own pace; ``needed``: those of best-fit windows begun at their start), and
    the rests an earlier reshard had left for after them."""
    out: list[Reshard] = []
    epoch = min(d.position.epoch for d in ordered)
    if epoch and epoch not in needed and all(at_start(d, epoch, cut) for d, cut in zip(
            ordered, cuts, strict=True)):  # fmt: skip
        epoch -= 1  # no old rank began it: the new world's own, after the last one's (empty) rest
    for rank, (d, cut) in enumerate(zip(ordered, cuts, strict=True)):
        # (a section per epoch: a gap no run made is refused.) An endless stream hands out a
        # document each epoch it passes (``nothing_read``); a share of a rest may hold none:
        # each is one of ``passed`` (the counts start there). Those of its epoch are not of an
        # epoch passed, but at its start (the last epoch's). A finite run's rank whose shares
        # are empty passes its epochs with none (no document out, nor one begun: ``cut``), but
        # never more of them than sections can be written for.
        at = d.position
        earlier = d.counters.documents - (d.counters.epoch_documents if at.block or at.in_block
                                          else 0)  # fmt: skip
        handed = d.counters.documents or cut
        if at.epoch - epoch > (earlier + len(d.passed) if handed else _MOST_APART):
            raise StateError(
                f"states of one run never differ so in epoch: old rank {rank} is at epoch "
                f"{d.position.epoch}, {d.position.epoch - epoch} past the earliest rank's, having "
                f"handed out {earlier} documents before it" + ("" if handed else " (a rank of "
                f"empty shares: at most {_MOST_APART} epochs past it)"), field="position.epoch",
            )  # fmt: skip
    while (
        section := _epoch_section(ordered, cuts, world, epoch, not out or epoch in needed, wheres)
    ) is not None:
        out.append(section)
        epoch += 1
    return out


def at_start(state: DocumentState, epoch: int, cut: int) -> bool:
    """``state`` is at ``epoch``'s very start, nothing of it begun (no concat cut into its first
    document, not in a rest)."""
    counters = state.counters
    return (state.position == Position(epoch) and state.reshard is None and not cut
            and not counters.epoch_documents)  # fmt: skip


def _epoch_section(
    ordered: Sequence[DocumentState],
    cuts: Sequence[int],
    world: int,
    epoch: int,
    first: bool,
    wheres: Sequence[tuple[int, int]],
) -> Reshard | None:
    """The section of ``epoch``'s rest (None: it is the new world size's own). A rank in it
    is at its state, a rank before it has not begun it, a rank past it had finished it. When
    the epoch was already a rest (an earlier reshard's), this world's shares of it are one
    level more; else its old ranks are this world's ranks."""
    # Ranks in or past the epoch say its rest with the cuts carried into it; a rank before
    # it only as its reshard wrote it (``later``): the same but for those cuts.
    said = {_view(d, epoch) for d in ordered if d.position.epoch >= epoch} - {_UNSAID}
    before = {_view(d, epoch) for d in ordered if d.position.epoch < epoch} - {_UNSAID}
    views = said or before or {None}
    if len(views) > 1 or len({_uncut(v) for v in views | before}) > 1:
        raise StateError(
            f"states of different reshards (their old ranks differ in epoch {epoch}): reshard "
            "the states of one run"
        )
    (base,) = views
    at = [d.position.epoch == epoch for d in ordered]
    past = [d.position.epoch > epoch for d in ordered]
    if base is None:
        ranks = tuple(
            _old_rank(d, epoch, cut, where) if d.position.epoch >= epoch else OldRank(0, 0)
            for d, cut, where in zip(ordered, cuts, wheres, strict=True)
        )
        if not first and all(r == OldRank(0, 0) for r in ranks):
            return None
        return Reshard(
            world_size=world,
            epoch=epoch,
            even=ordered[0].config.even,
            ranks=ranks,
            # Whose position must agree exactly with its count (no skip): checked when read.
            exact=tuple(d.counters.skips == 0 for d in ordered),
        )
    if not any(at) and not any(past):  # this world had not begun it: as it was left
        return base
    for rank, d in enumerate(ordered):
        if at[rank] and d.reshard is not None and d.reshard.share != (rank, world):
            raise StateError(f"rank {rank}'s state is share {list(d.reshard.share)!r}")
    # Each share's slots passed: its documents handed out, and the slots of those it skipped.
    slots = [d.counters.epoch_documents + d.position.in_block for d in ordered]
    level = Level(
        world_size=world,
        rule=ordered[0].config.even,  # (the rule a reshard gave its new ranks' shares)
        done=tuple(passed * a for passed, a in zip(slots, at, strict=True)),
        cuts=tuple(c * a for c, a in zip(cuts, at, strict=True)),
        gaps=gaps
        if any(gaps := tuple(g * a for (g, _), a in zip(wheres, at, strict=True)))
        else (),
        ahead=ahead
        if any(ahead := tuple(n * a for (_, n), a in zip(wheres, at, strict=True)))
        else (),
        finished=tuple(r for r, p in enumerate(past) if p),
        led=tuple(r for r, d in enumerate(ordered) if at[r] and d.reshard and d.reshard.led),
        follows=tuple(
            r for r, d in enumerate(ordered) if at[r] and d.reshard and d.reshard.follows
        ),
        counted=_last_counted(ordered[-1], at[-1], past[-1]),
    )
    levels = base.levels
    if level.counted:  # (the last share's count held every earlier level's left uncounted)
        levels = tuple(replace(earlier, counted=True) for earlier in levels)
    return replace(base, levels=(*levels, level))


def _last_counted(last: DocumentState, at: bool, past: bool) -> bool:
    """Whether the last share of a rest had counted what ``drop`` left out of it (and of the
    earlier levels it counts for) at its state: past the epoch, or in it once it began handing
    its rest out (a state at a best-fit window begun before is at that window's start)."""
    return past or (at and (last.reshard is None or last.reshard.counted))


#: ``_view`` of an epoch after a rest's sections: its world's own, or a rest that the cuts
#: carried into it make (``rest.next_section``), which a rank already in it says.
_UNSAID = Reshard(world_size=1, epoch=0, even=None, ranks=(OldRank(0, 0),))


def _uncut(section: Reshard | None) -> Reshard | None:
    """``section`` without its concat cuts: nor the levels on top that hold nothing else, which
    the cuts carried into the epoch add (``rest.next_section``: a world that had not begun it,
    as only its ranks that handed the epoch before out to its end know)."""
    if section is None:
        return None
    ranks = tuple(replace(old, cut=0, gap=0, ahead=0) for old in section.ranks)
    levels = [replace(level, cuts=(0,) * len(level.cuts), follows=(), led=(), gaps=(), ahead=())
              for level in section.levels]  # fmt: skip
    while levels and not any(levels[-1].done) and not levels[-1].finished:
        levels.pop()
    return replace(section, ranks=ranks, levels=tuple(levels))


def _view(state: DocumentState, epoch: int) -> Reshard | None:
    """What ``state`` says of ``epoch``: the section of a rest (as every share of it has it),
    None (an epoch of its world's own), or ``_UNSAID`` (a rank past it says only the rests it
    handed out: ``DocumentState.passed``)."""
    section = state.reshard
    if state.position.epoch > epoch:
        said = [p for p in state.passed if p.epoch == epoch]
        return said[0] if said else _UNSAID
    if section is None:
        return None
    k = epoch - state.position.epoch
    if k == 0:
        return replace(section.base(), later=())
    return section.later[k - 1] if k - 1 < len(section.later) else _UNSAID


def _old_rank(state: DocumentState, epoch: int, cut: int, where: tuple[int, int]) -> OldRank:
    """An old rank at ``state`` in ``epoch``: finished if it is past it."""
    position = state.position
    if position.epoch > epoch:
        return OldRank(0, 0, finished=True)
    return OldRank(position.block, position.in_block, state.counters.epoch_documents, cut=cut,
                   gap=where[0], ahead=where[1], pass_end=position.pass_end or None)  # fmt: skip
