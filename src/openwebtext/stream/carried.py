"""The concat cuts a rest carries into the next epoch (``Rest.following``): a rank that had
handed out all of its share of an epoch while a batch had begun its next epoch's first document
makes that epoch a rest too, so that the document goes on from its first id not yet a target;
and where a cut's document lies among the slots of skipped ones (``cut_slot``, as a batches state
says it; ``piece_start``, as a rest finds it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from openwebtext.codec import replace
from openwebtext.plan import Rule
from openwebtext.stream.sections import Begun, Level, OldRank, Reshard
from openwebtext.stream.source import Run, TokenRun, slots_at
from openwebtext.stream.spans import Span

__all__ = ["Carrier", "Carry", "cut_slot", "is_carried", "next_section", "piece_start"]


class Carry(NamedTuple):
    """A concat cut a share carries into its next epoch's first document (``Rest.carried``)."""

    cut: int
    gap: int = 0
    """The slots skipped in that epoch before the document (``OldRank.gap``)."""
    ahead: int = 0
    """The epochs past the next it lies in (``OldRank.ahead``)."""
    unled: bool = False
    """A corpus's: that document did not lead its stream (the share of this epoch held
    documents, or did not lead): it goes on from its first id not yet a target
    (``Level.follows``)."""
    led: bool = False
    """A mixture's part's: that document led its stream (the share of this epoch held none,
    and led): it goes on from the last id that was a target (``Level.led``)."""


class Carrier(Protocol):
    """What ``next_section`` reads of a rest (``rest.Rest``)."""

    section: Reshard
    carried: list[dict[int, Carry]]
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
        carried = rest.carried[last]
        if built.levels:
            top = built.levels[-1]
            none, new = (0,) * top.world_size, [carried.get(s) for s in range(top.world_size)]
            cuts = tuple(c if n is None else n.cut for n, c in zip(new, top.cuts, strict=True))
            gapped = tuple(g if n is None else n.gap
                           for n, g in zip(new, top.gaps or none, strict=True))  # fmt: skip
            further = tuple(a if n is None else n.ahead
                            for n, a in zip(new, top.ahead or none, strict=True))  # fmt: skip
            follows = tuple(sorted({*top.follows, *(s for s, c in carried.items() if c.unled)}))
            led = tuple(sorted({*top.led, *(s for s, c in carried.items() if c.led)}))
            top = replace(top, cuts=cuts, follows=follows, led=led,
                          gaps=gapped if any(gapped) else (),
                          ahead=further if any(further) else ())  # fmt: skip
            built = replace(built, levels=(*built.levels[:-1], top))
        else:
            ranks = tuple(old if (c := carried.get(r)) is None else
                          replace(old, cut=c.cut, gap=c.gap, ahead=c.ahead)
                          for r, old in enumerate(built.ranks))  # fmt: skip
            built = replace(built, ranks=ranks)
    for (world, rule), carried in list(zip(worlds, rest.carried, strict=True))[last + 1 :]:
        if not carried:
            continue
        each = [carried.get(r, Carry(0)) for r in range(world)]
        gap, further = tuple(c.gap for c in each), tuple(c.ahead for c in each)
        if built is None:
            ranks = tuple(OldRank(0, 0, cut=c.cut, gap=c.gap, ahead=c.ahead) for c in each)
            built = Reshard(world_size=world, epoch=section.epoch + 1, even=rule, ranks=ranks,
                            share=section.share, rule=section.rule, counted=False)  # fmt: skip
        else:
            level = Level(world_size=world, rule=rule, done=(0,) * world,
                          cuts=tuple(c.cut for c in each),
                          follows=tuple(r for r, c in enumerate(each) if c.unled),
                          led=tuple(r for r, c in enumerate(each) if c.led),
                          gaps=gap if any(gap) else (),
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


def cut_slot(run: Run, j: int) -> dict[str, Any]:
    """Where document ``j`` of ``run`` (the one the next batch starts in) lies from its stream's
    mark before it (a mixture's: its part's, ``MixtureState.next``): past the slots of documents
    skipped between (``BatchesState.cut_slots``), in the next epochs (``cut_next``: its slots
    counted from that epoch's start)."""
    if isinstance(run, TokenRun):
        if j:  # (inside a run: none between)
            return {}
        before, slot, epoch = run.before, run.first_slot(), run.epoch
    else:  # a mixture's: its part's mark before it, and after it (the part's run had it last)
        mark = run.mark_before(j)
        assert mark.next is not None  # (a document follows)
        before, after = mark.parts[mark.next], run.part_after(j)
        slot, epoch = slots_at(after._replace(in_block=after.in_block - 1)), after.epoch
    ahead = epoch - before.epoch
    slots = slot if ahead else slot - slots_at(before)
    return ({"cut_slots": slots} if slots > 0 else {}) | ({"cut_next": ahead} if ahead else {})


def is_carried(cut: int | bool, left: int, ahead: int, rule: Rule | None) -> bool:
    """Whether a share's concat cut (``cut``: it has one) is in its next epoch's first document
    (``Rest.carried``), its share having ``left`` slots: said so (``ahead``, a batches state's
    ``cut_next``), or all of its slots passed. Evened out (``rule``), a share its skips left short
    goes round again (``Stream._rest_documents``, ``epochs.EvenPasses``): with all its slots
    passed, a cut the state does not say is ahead (a corpus's, or a mixture's part's: the batches
    state says it of the part its next batch starts in) is in a document that pass repeats, not
    in the next epoch; it is left out with the repeats that pass still owed (the new shares are
    evened out anew)."""
    if not cut:
        return False
    if ahead:
        return True
    return not left and rule is None
