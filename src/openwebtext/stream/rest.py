"""The rest of a resharded epoch: what the old ranks left of it, and the share of it that one
new rank hands out (``Rest``, built from a state's ``reshard`` section and the document counts).

The old ranks' rest is one sequence: old rank 0's remaining documents, in the order it would
have handed them out, then old rank 1's, and so on (the "rest sequence"). An index into it is a
document *slot*, as the document counts count them: a document the stream skips for its content
(or a unit skipped whole) still holds its slot, since nothing here knows where skips lie. A
reshard cuts it into one equal share per new rank: ``drop`` leaves the last few out, ``pad``
goes round to its start for the missing ones (repeats), without even sharding the shares differ
by at most one. Resharding again before that epoch ends adds a level: each rank's share minus
the slots it passed (its documents handed out, and its state's ``position.in_block``: those of
the documents it skipped), joined in rank order, is cut again. Everything is intervals of the
rest sequence, so the section stays O(ranks) whatever the corpus size.

A share is handed out as pieces: runs of one old rank's slots, read as that rank would (its plan
order, blocks and permutations; blocks are cut in slots, ``blocks.gather``), from the position
``advance`` computes with the document counts (an old rank's rest starts at the slots it had
passed: ``epochs.slots_passed``). Evened out, a share its skips left short goes round again,
repeating its documents (counted), until it has handed out as many as it has slots, as a rank's
evened-out epoch does (``Stream._rest_documents``). With packed batches a document cut across
the checkpoint goes on from the first id not yet a target (``trim``).

Best-fit batches are cut at windows, not documents: an old rank's state is at the start of the
window it was handing rows of, so that window's documents are not in the rest sequence; they
stay one *window* (an interval of the rest sequence's coordinates, its number and the rows of
it already handed out), dealt round robin to the new ranks. A share hands out its windows'
documents first (``Rest.windows``: best fit packs each of them again the same way and skips the
rows handed out), then its part of the rest sequence. Resharding again carries the windows not
finished into the next level the same way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from openwebtext.codec import replace
from openwebtext.errors import StateError
from openwebtext.options import Options
from openwebtext.plan import Rule, Share, advance
from openwebtext.stream.carried import Carry, is_carried, next_section, piece_start
from openwebtext.stream.dealing import Window, applied_trim, heads, windows_left
from openwebtext.stream.epochs import (
    block_end,
    block_size,
    check_old_ranks,
    epoch_shares,
    slots_passed,
)
from openwebtext.stream.overrun import Overrun, overrun_of
from openwebtext.stream.sections import NOT_ACROSS, Begun, OldRank, Reshard
from openwebtext.stream.source import WindowAhead
from openwebtext.stream.spans import Span, count, cut_share, drop_front, owner_of

__all__ = ["Piece", "Rest", "Window", "ended", "next_section"]


class Dealt(NamedTuple):
    """A best-fit window dealt to a share: the window, and its documents as intervals of the
    rests they are read from (two when it crosses an epoch's end)."""

    window: Window
    segments: list[tuple[Rest, list[Span]]]

    @property
    def documents(self) -> int:
        return sum(count(spans) for _, spans in self.segments)


class Piece(NamedTuple):
    """A run of ``documents`` document slots of one old rank's share, read as that rank would:
    from position ``(block, in_block)`` (in slots, ``plan.advance``'s) to the end of the block
    its last slot is in (plan position ``end``)."""

    rank: int
    share: Share
    block: int
    in_block: int
    documents: int
    """Its document slots (a document skipped for its content holds one)."""
    end: int
    """The plan position its last block ends at (where its units end)."""
    repeat: bool
    """Handed out again (``pad``): counted in ``repeated_documents``."""
    trim: int
    """Ids of the piece's first document to leave out (delivered before the checkpoint)."""
    epoch: int
    """The epoch whose plan it is read with: the rest's (a later epoch's for a window dealt
    first, ``Rest.windows``)."""
    overrun: Overrun | None = None
    """A best-fit window's overrun into the pass repeating its old rank's share (its slots:
    ``documents``; ``in_block``: those of them passed before)."""
    led: bool = False
    """Its first document is the share's first, which led: ``trim`` is one less (the last id
    that was a target goes first again, no target)."""


class Rest:
    """One new rank's share of the rest of a resharded epoch.

    Args:
        section: The state's ``reshard`` section (``reshard.reshard`` writes it).
        counts: Documents of every unit (the stream's even counts).
        options: The new rank's options (seed, shuffle, block size).
        leads: The share's first id is the rank's first, which no batch makes a target (a
            corpus's); False for a mixture's part, whose rank may hand out another part's
            document first: a document cut across the checkpoint then goes on from its first
            id not yet a target, never from the last one that was (unless the mixture hands it
            out first: ``Stream.lead_cut`` sets it, and ``Reshard.led`` says it).
        part: The mixture's part this is a rest of (named in errors).
        entry: The section comes from a state (its ``later`` epochs are checked here too);
            False for one made from another (checked when that one entered).
    """

    def __init__(
        self,
        section: Reshard,
        counts: Sequence[int],
        options: Options,
        *,
        leads: bool = True,
        part: str | None = None,
        entry: bool = True,
    ):
        self.section = section
        self.leads = (leads and not section.follows) or section.led
        self.first_leads = leads  # (a corpus's: its shares lead unless their state says not)
        self.counts, self.options, self.part = counts, options, part
        self.epoch = section.epoch
        world = section.world_size
        rule: Rule | None = section.even
        epoch = epoch_shares(len(counts), counts, options, self.epoch)
        self.shares = [epoch.share(r, world, rule) for r in range(world)]
        self.size = block_size(options)
        # The rest sequence: each old rank's remaining documents (and its window's overrun,
        # ``overrun``), in rank order.
        self.starts: list[int] = []
        self.ends: list[int] = []  # (where each one's remaining documents end)
        self.overruns: dict[int, tuple[Overrun, int]] = {}  # (and their slots)
        spans: list[Span] = []
        mid: dict[int, int] = {}  # ids of a document already targets (batches)
        self.gapped: dict[int, int] = {}
        """Of ``mid``: a cut's document past slots of documents skipped before it (the state's
        ``cut_slots``), and where those slots begin: a share that begins among them begins
        with that document (``heads``)."""
        begun = {b.rank: b for b in section.windows or ()}
        self.carried: list[dict[int, Carry]] = [{}]
        """Per world (the old ranks', then each level's): the ranks whose concat cut is in
        their next epoch's first document (all of their share handed out), and their cuts."""
        windows: list[Window] = []  # best fit: the windows old ranks had begun
        ranked: list[int] = []  # (their old ranks)
        self.begun: dict[int, Begun] = begun
        self.crossing: dict[int, Begun] = {}
        """Best fit of a mixture's part: the old ranks whose window crosses the epoch's end,
        and the window as the next epoch deals it (the first of their share of it)."""
        at, size = 0, section.window or 0
        check_old_ranks(section, counts, options, later=entry)
        for r, old in enumerate(section.ranks):
            per = self.shares[r].counts
            assert per is not None  # (its slots from its position on)
            remaining = 0 if old.finished else sum(per) - slots_passed(per, old.block, old.in_block)
            if is_carried(old.cut and not old.finished, remaining, old.ahead, rule):
                # (its next document: the next epoch's first, ``next_section``)
                self.carried[0][r] = Carry(old.cut, old.gap, max(old.ahead - 1, 0),
                                           leads and any(per))  # fmt: skip
            self.starts.append(at)
            self.ends.append(at + remaining)
            first, b = at, begun.get(r)
            over = overrun_of(r, old, b, self.shares[r], remaining, size)
            # Its window's documents: a window, not the sequence (a mixture's part's: its
            # documents in the window, none too, so that every part deals the same windows).
            if b is not None and (remaining or over or b.documents is not None):
                m = _window_slots(r, old, b, per, remaining, section)  # (a part's: refused?)
                if m > remaining and not section.levels:  # the rest: the next epoch's first
                    self.crossing[r], m = _crossed(b, m - remaining), remaining
                if m > remaining:
                    raise StateError(
                        f"old rank {r}'s best-fit window holds {m} documents of its share of "
                        f"epoch {self.epoch} of the mixture's part {part!r}, which had "
                        f"{remaining} left: the window crosses the part's epoch end; resume "
                        "on the same world size, or reshard when no window does"
                    )
                if over is not None:  # (its slots past the share's: the window's other ones)
                    m, self.overruns[r] = size, (over, size - remaining)
                windows.append(Window([(at, at + m, False)], b.number, b.rows, b.packings))
                ranked.append(r)
                first = at + m
            if at + remaining > first:
                spans.append((first, at + remaining, False))
                if old.cut and not old.ahead:  # (the document: past the slots skipped before)
                    x = at + old.gap if old.gap < remaining else at
                    mid[x] = old.cut
                    if x > first:
                        self.gapped[x] = first
            at = max(at + remaining, first)
        if section.dealt and section.levels:  # resharded again: the old ranks' windows were
            windows = []  # handed out in an earlier epoch's rest, in no level's share (``_dealt``)
        spans, mid, windows, uncounted = _levels(self, spans, mid, windows, size, leads)
        share_rank, share_world = section.share
        plain, dropped = cut_share(spans, share_rank, share_world, section.rule)
        self.ranked, self.own = ranked, windows
        self.windows: list[Dealt] = self._dealt()[share_rank::share_world]
        """The windows this share hands out first (best fit), in order."""
        self.segments = [s for dealt in self.windows for s in dealt.segments] + [(self, plain)]
        self.spans = [span for _, spans in self.segments for span in spans]
        self.dropped_here = dropped + uncounted if share_rank == share_world - 1 else 0
        """What ``drop`` left out, for the last share to count (0 for the others), with what
        earlier reshards' levels left out that their last shares had not counted."""
        self.mid = mid
        self.length = count(self.spans)
        self.documents = self.length - sum(
            owner.overrun_slots(spans) for owner, spans in self.segments
        )
        """The documents it hands out evened out: its slots less its overruns' (``Piece``)."""

    def least_repeats(self, progress: int) -> dict[int, tuple[int, int]]:
        """The windows this share starts with at or after its first ``progress`` slots whose
        slots must hand out documents again (``Window.least``): ``{end: (start, least)}``."""
        out, at = {}, 0
        for dealt in self.windows:
            if dealt.window.least and at >= progress:
                out[at + dealt.documents] = (at, dealt.window.least)
            at += dealt.documents
        return out

    def overrun_slots(self, spans: list[Span]) -> int:
        """The slots of overruns (``Piece.overrun``) ``spans`` hold."""
        zones = [(self.ends[r], self.ends[r] + size) for r, (_, size) in self.overruns.items()]
        return sum(max(0, min(b, y) - max(a, x)) for a, b, _ in spans for x, y in zones)

    def _dealt(self) -> list[Dealt]:
        """The best-fit windows to deal: a level's, in the order they were carried; else
        those of every epoch's section in old rank order (a mixture's part's ranks may be in
        different epochs of it: the mixture deals its windows so), handed out first in the
        first epoch's rest (a later one's, ``dealt``, only leaves their documents out). A window
        that crosses an epoch's end goes on with the first documents of its rank's share of the
        next epoch (``crossing``), which that epoch's rest leaves out."""
        if self.section.levels:
            return [Dealt(w, [(self, w.spans)]) for w in self.own]
        if self.section.dealt or self.section.window is None:
            return []
        owned: list[tuple[int, Dealt]] = []
        rest, later = self, list(self.section.later)
        going: dict[int, Dealt] = {}
        while True:
            coming: dict[int, Dealt] = {}
            for r, w in zip(rest.ranked, rest.own, strict=True):
                dealt = going.get(r)
                if dealt is None:
                    dealt = Dealt(w, [])
                    owned.append((r, dealt))
                dealt.segments.append((rest, w.spans))
                if r in rest.crossing:
                    coming[r] = dealt
            if not later and not coming:
                break
            section = later.pop(0) if later else rest.not_begun()
            # (``dealt``: dealt here, not again by that rest, which would deal every later one)
            section = replace(section, share=(0, 1), rule=None, dealt=True, windows=(
                *(section.windows or ()), *rest.crossed(coming)))  # fmt: skip
            rest = Rest(section, self.counts, self.options, part=self.part, entry=False)
            going = coming
        owned.sort(key=lambda item: item[0])
        return [dealt for _, dealt in owned]

    def crossed(self, ranks: Iterable[int]) -> list[Begun]:
        """What the next epoch's section leaves out of ``ranks``' shares: their windows'
        slots past this epoch's end (``crossing``), as windows of those ranks."""
        return [self.crossing[r] for r in ranks]

    def not_begun(self) -> Reshard:
        """The next epoch's section when no old rank had begun it (a window crossed into it)."""
        section = self.section
        return replace(section, epoch=self.epoch + 1, ranks=(OldRank(0, 0),) * section.world_size,
                       windows=(), later=(), exact=None, counted=False)  # fmt: skip

    def lead(self, may: bool = True) -> Reshard:
        """The section, after letting this share's first document lead if it is one cut
        across a checkpoint of concat batches (``may``; a mixture's part, whose mixture then
        hands it out first: the rank's first row begins with it): it goes on from the last id
        that was a target, no target again, as a corpus's share does; the section says it led
        (``Reshard.led``), so that a reshard after reads its cut the same way (``Level.led``).
        Its first document: past the slots of skipped ones before a cut's (``gapped``); a share
        of no slot, the next epoch's rest's first. To be called before any of it is handed out."""
        if self.section.led or not may:
            return self.section
        pieces = self.pieces(0)
        first = next(pieces, None)
        if first is not None and not first.trim and self.spans and not self.spans[0][2] and any(
            heads(self.gapped, self.spans[0][0], x) for x in self.gapped
        ):  # (its first slots: documents skipped before a cut's, the piece after them)
            first = next(pieces, None)
        if (first is not None and first.trim) or (not self.length and self._next_leads()):
            self.leads, self.section = True, replace(self.section, led=True)
        return self.section

    def _next_leads(self) -> bool:
        """An empty share: whether the next epoch's rest's first document is one cut across a
        checkpoint (that one leads then: ``following``)."""
        following = self.following()
        return following is not None and following.lead().led

    def said(self) -> Reshard:
        """This epoch's section as every share of it says it (``DocumentState.passed``)."""
        return replace(self.section.base(), later=())

    def following(self) -> Rest | None:
        """The next epoch's rest, or None: the next epoch is the rank's own (``next_section``).
        Its first id leads only if this share held none (else it follows this share's): a
        corpus's section says when it follows, a mixture's part's when it leads (``led``)."""
        section = next_section(self)
        if section is None:
            return None
        leads = self.leads and not self.length
        if self.first_leads and not leads:  # (a corpus's: its state says it, ``follows``)
            section = replace(section, follows=True)
        elif leads and not self.first_leads:  # (a part's, led through an empty share: said)
            section = replace(section, led=True)
        return Rest(section, self.counts, self.options, leads=self.first_leads,
                    part=self.part, entry=False)  # fmt: skip

    def windows_ahead(self, progress: int) -> list[WindowAhead]:
        """``(documents, number, rows handed out, packings)`` of the windows this share
        starts with that begin at or after its first ``progress`` documents (best fit)."""
        out: list[WindowAhead] = []
        at = 0
        for dealt in self.windows:
            window = dealt.window
            if at >= progress:
                out.append((dealt.documents, window.number, window.skip, window.packings))
            at += dealt.documents
        return out

    def pieces(self, progress: int) -> Iterator[Piece]:
        """The pieces of this share after its first ``progress`` documents."""
        lead = self.leads and progress == 0  # the share's first document leads
        for owner, spans in self.segments:
            n = count(spans)
            if progress < n:
                yield from owner._pieces(spans, progress, lead, owner.epoch)
            lead, progress = lead and not n, max(0, progress - n)

    def _pieces(self, spans: list[Span], progress: int, lead: bool, epoch: int
                ) -> Iterator[Piece]:  # fmt: skip
        """The pieces of ``spans`` (of this rest's sequence) after their first ``progress``
        documents; ``lead``: their first document is the share's first."""
        first = spans[0][0]
        ranks = self.section.ranks
        keys = sorted(self.mid)  # (a piece ends where a cut's document begins)
        for a, b, repeat in drop_front(spans, progress):
            while a < b:
                r = owner_of(self.starts, a)
                end = self.starts[r + 1] if r + 1 < len(self.starts) else b
                stop = min(b, end)
                k = a - self.starts[r]
                old, share = ranks[r], self.shares[r]
                if a >= self.ends[r]:  # its window's overrun
                    yield Piece(r, share, 0, a - self.ends[r], stop - a, 0, True, 0, epoch,
                                self.overruns[r][0])  # fmt: skip
                    a = stop
                    continue
                stop = min(stop, self.ends[r])
                nearest = bisect_right(keys, a)
                stop = min(stop, keys[nearest]) if nearest < len(keys) else stop
                assert share.counts is not None  # (in slots: one pass, to the share's end)
                at = advance(share.counts, self.size, (old.block, old.in_block, 0), k, None)
                last, inside = advance(share.counts, self.size, (*at, 0), stop - a, None)
                end = block_end(share.counts, self.size, last) if inside else last
                trim, led = 0, False
                if not repeat:  # the share's first id is no target: start at the last one
                    trim = self.mid.get(a, 0)
                    if heads(self.gapped, first, a) and lead:
                        trim, led = max(trim - 1, 0), True
                yield Piece(r, share, *at, stop - a, end, repeat, trim, epoch, led=led)
                a = stop


def _levels(
    rest: Rest, spans: list[Span], mid: dict[int, int], windows: list[Window], size: int,
    leads: bool,
) -> tuple[list[Span], dict[int, int], list[Window], int]:  # fmt: skip
    """The rest sequence after each level of the section (the shares of an earlier
    reshard, minus what their ranks handed out): its spans, concat cuts and best-fit
    windows, and what ``drop`` left out at levels whose last share had not counted it
    (``leads``: the stream's first document of a concat share led, as ``Rest``'s)."""
    section, part = rest.section, rest.part
    uncounted = 0  # what ``drop`` left out at levels whose last share had not counted it
    for level in section.levels:
        if not level.counted:
            uncounted += cut_share(spans, 0, level.world_size, level.rule)[1]
        joined: list[Span] = []
        carried: list[Window] = []
        new_mid = dict(mid)
        rest.carried.append({})
        for s in range(level.world_size):
            share, _ = cut_share(spans, s, level.world_size, level.rule)
            done, cut = level.done[s], level.cuts[s]
            if s in level.finished:  # its rank was past this epoch: all of it handed out
                if level.windows is not None:  # (best fit: its windows dealt too)
                    continue
                done = count(share)
            if level.windows is not None:  # best fit: what of its windows and share is left
                at_window = level.windows[s]
                dealt = windows[s :: level.world_size]
                try:
                    left_windows, left = windows_left(dealt, share, done, at_window, size)
                except StateError as exc:
                    if part is None:
                        raise
                    raise StateError(f"the mixture's part {part!r}: {exc}") from None
                carried += left_windows
                joined += left
                continue
            left = drop_front(share, done)
            # (a corpus's share led unless its state said it followed others; a part's
            # share, if it led, said)
            led = (leads and s not in level.follows) or s in level.led
            gap, ahead = (said[s] if said else 0 for said in (level.gaps, level.ahead))
            if is_carried(cut and s not in level.finished, count(left), ahead, level.rule):
                # (its next epoch's first: not its stream's first if its share held some; a
                # part's, its stream's first if its share held none and led: ``Carry.led``)
                held = bool(count(share))
                rest.carried[-1][s] = Carry(cut, gap, max(ahead - 1, 0),
                                            leads and (held or not led),
                                            not leads and led and not held)  # fmt: skip
            elif left and cut:  # (its document: past the slots skipped before it)
                x, _, repeat = drop_front(left, gap)[0] if gap < count(left) else left[0]
                at = piece_start(left[0][0], x, share, rest.starts, mid)
                # (its share's slots before it all skipped: it was its first, ``_leads_with``)
                applied = 0 if at is None else applied_trim(mid, share, done, at, repeat, led,
                                                            rest.gapped, bool(gap))  # fmt: skip
                new_mid[x] = applied + cut
                if gap and x - left[0][0] == gap:  # (skipped slots before it: one span's)
                    rest.gapped[x] = left[0][0]
            joined += left
        spans, mid, windows = joined, new_mid, carried
    return spans, mid, windows, uncounted


def ended(
    rest: Rest | None, passed: tuple[Reshard, ...]
) -> tuple[tuple[Reshard, ...], Rest | None]:
    """At an epoch's end: the rests handed out to their end (``DocumentState.passed``) and the
    next epoch's rest (None: the rank's own), after ``rest`` (None: an epoch of the rank's own)."""
    if rest is None:
        return passed, None
    return (*passed, rest.said()), rest.following()


def _crossed(window: Begun, past: int) -> Begun:
    """A part's best-fit ``window`` crossing its epoch's end, ``past`` slots of it past there,
    as the next epoch deals it: to that epoch's end again where it crosses more than one
    (``FitWindow.across``), else its slots of the last one (its documents there: at most those,
    and the window's)."""
    ends, slots = window.across.ends, window.across.slots or past
    if ends > 1:
        return replace(window, across=replace(window.across, ends=ends - 1))
    held = min(slots, window.documents or slots)
    return replace(window, documents=held, slots=slots if slots > held else None, across=NOT_ACROSS)


def _window_slots(rank: int, old: OldRank, window: Begun, counts: Sequence[int],
                  remaining: int, section: Reshard) -> int:  # fmt: skip
    """The slots of old rank ``rank``'s share (``counts``, ``remaining`` of them left) its
    best-fit ``window`` holds: a corpus's, the window's or fewer (the share's end); a mixture
    part's, as its state says (``FitWindow.dealt``). A part's window that crosses its epoch's
    end (``FitWindow.across``) holds all the slots left and then slots of the next epoch (the
    first it says, or all: ``Rest.crossing``), unless its share was evened
    out after skips: its documents past the share's end are then those of a pass repeating
    it, which a part's window (its turns' documents, not an overrun's slots) cannot follow;
    nor a window resharded again.

    Raises:
        StateError: such a window with skips among its documents (``FitWindow.slots``), or in
            its evened-out share before the state (the pass repeating it: its share's end is
            no epoch's end).
    """
    size = section.window or 0
    if window.dealt is None:
        return min(size, remaining)
    passed = sum(counts) - remaining
    skipped = not old.finished and (passed > old.handed or old.pass_end is not None)
    evened = section.even is not None and skipped  # (its share's end: no epoch's end)
    crosses = window.across.ends
    if crosses and not section.levels and not evened:  # (all its share's left, then)
        return remaining + window.across.slots  # (past it: where it crosses more than one, any)
    if not crosses and (window.dealt <= remaining or section.levels or (
        window.slots is None and not evened
    )):  # fmt: skip
        return window.dealt
    why = (f"runs past the end of its share ({remaining} slots left) after skips, into the "
           "pass repeating its documents or the next epoch")  # fmt: skip
    if crosses and section.levels:  # (``reshard`` refuses to make such states)
        why = "crosses its part's epoch end, in states resharded again"
    raise StateError(
        f"old rank {rank}'s best-fit window {why}, which a reshard does not follow (its "
        "documents would be lost or handed out twice): resume these states on their world size "
        "until that window is out, then reshard"
    )
