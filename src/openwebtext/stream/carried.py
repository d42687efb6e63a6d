"""The concat cuts a rest carries into the next epoch (``Rest.following``): a rank that had
handed out all of its share of an epoch while a batch had begun its next epoch's first document
makes that epoch a rest too, so that the document goes on from its first id not yet a target;
and where a cut's document lies among the slots of skipped ones (``cut_slot``, as a batches state
says it; ``piece_start``, as a rest finds it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from openwebtext.codec import replace
from openwebtext.stream.sections import Begun, Level, OldRank, Reshard
from openwebtext.stream.source import Run, TokenRun, slots_at
from openwebtext.stream.spans import Span

__all__ = ["Carrier", "cut_slot", "next_section", "piece_start"]


class Carrier(Protocol):
    """What ``next_section`` reads of a rest (``rest.Rest``)."""

    section: Reshard
    carried: list[dict[int, int]]
    gaps: list[dict[int, int]]
    aheads: list[dict[int, int]]
    unled: list[set[int]]
    crossing: dict[int, Begun]

    def not_begun(self) -> Reshard: ...

    def crossed(self, ranks: Iterable[int]) -> list[Begun]: ...


def next_section(rest: Carrier) -> Reshard | None:
    """The section of the epoch after ``rest``'s (``Reshard.following``), with the cuts of
    ranks that had handed out all of this epoch while a batch had begun their next epoch's first
    document (``carried``): that epoch is then a rest too (their ranks not begun, theirs
    cut), so that the document goes on from its first id not yet a target.

    The worlds of this epoch (its old ranks', then each level's) resharded one into the
    next. A world with a rank past this epoch had begun the next: the reshard of the
    last such world put it on top of ``following`` (as its old ranks, or its last level),
    and its carried cuts go there. Each world after it had not begun the next epoch: with
    carried cuts it adds itself on top, not begun (as its old ranks, when it is first)."""
    section = rest.section
    following = section.following()
    worlds = [(section.world_size, section.even),
              *((level.world_size, level.rule) for level in section.levels)]  # fmt: skip
    began = [any(old.finished for old in section.ranks),
             *(bool(level.finished) for level in section.levels)]  # fmt: skip
    last = max((k for k, b in enumerate(began) if b), default=-1)
    built = following
    if built is not None and last >= 0 and rest.carried[last]:
        cuts, gaps, aheads = rest.carried[last], rest.gaps[last], rest.aheads[last]
        if built.levels:
            top = built.levels[-1]
            follows = tuple(sorted({*top.follows, *rest.unled[last]}))
            none = (0,) * top.world_size
            gapped, further = (
                tuple(new.get(s, g) for s, g in enumerate(had or none))
                for new, had in ((gaps, top.gaps), (aheads, top.ahead))
            )
            top = replace(top, cuts=tuple(cuts.get(s, c) for s, c in enumerate(top.cuts)),
                          follows=follows, gaps=gapped if any(gapped) else (),
                          ahead=further if any(further) else ())  # fmt: skip
            built = replace(built, levels=(*built.levels[:-1], top))
        else:
            ranks = tuple(replace(old, cut=cuts.get(r, old.cut), gap=gaps.get(r, old.gap),
                                  ahead=aheads.get(r, old.ahead))
                          for r, old in enumerate(built.ranks))  # fmt: skip
            built = replace(built, ranks=ranks)
    for (world, rule), cuts, unled, gaps, aheads in list(zip(
        worlds, rest.carried, rest.unled, rest.gaps, rest.aheads, strict=True
    ))[last + 1 :]:  # fmt: skip
        if not cuts:
            continue
        cut = tuple(cuts.get(r, 0) for r in range(world))
        gap = tuple(gaps.get(r, 0) for r in range(world))
        further = tuple(aheads.get(r, 0) for r in range(world))
        if built is None:
            ranks = tuple(OldRank(0, 0, cut=c, gap=g, ahead=n)
                          for c, g, n in zip(cut, gap, further, strict=True))  # fmt: skip
            built = Reshard(world_size=world, epoch=section.epoch + 1, even=rule, ranks=ranks,
                            share=section.share, rule=section.rule, counted=False)  # fmt: skip
        else:
            level = Level(world_size=world, rule=rule, done=(0,) * world, cuts=cut,
                          follows=tuple(sorted(unled)), gaps=gap if any(gap) else (),
                          ahead=further if any(further) else ())  # fmt: skip
            built = replace(built, levels=(*built.levels, level))
    if rest.crossing:  # windows that cross into it: their documents there left out
        built = built or replace(rest.not_begun(), share=section.share, rule=section.rule)
        windows = (*(built.windows or ()), *rest.crossed(rest.crossing))
        built = replace(built, windows=windows, dealt=True)
    return built


def piece_start(after: int, x: int, share: Sequence[Span], starts: Sequence[int],
                 mid: dict[int, int]) -> int | None:  # fmt: skip
    """Where the piece of ``share`` (``Rest._pieces``) whose first document is the one in slot
    ``x`` begins, the slots from ``after`` to ``x`` skipped: at a span's start, an old rank's, or
    a cut's document, whichever is last (None: it began before ``after``, its first document
    was handed out before, and the one in ``x`` had nothing left out)."""
    bounds = [a for a, _, _ in share] + list(starts) + list(mid)
    return max((b for b in bounds if after <= b <= x), default=None)


def cut_slot(run: Run, mark: Any) -> dict[str, Any]:
    """Where the document the next batch starts in lies from ``mark`` (its run's mark before
    it): past the slots of documents skipped between (``BatchesState.cut_slots``), in the next
    epochs (``cut_next``: its slots counted from that epoch's start). A mixture's: none said."""
    if not isinstance(run, TokenRun) or mark is not run.before:  # (inside a run: none between)
        return {}
    first = run.first_slot()
    ahead = run.epoch - mark.epoch
    slots = first if ahead else first - slots_at(mark)
    return ({"cut_slots": slots} if slots > 0 else {}) | ({"cut_next": ahead} if ahead else {})
