"""The ``reshard`` section of a saved state (format 2, ``schema.DocumentState.reshard``): the
rest of a resharded epoch as the old ranks left it, in O(old ranks) integers, never a list of
documents. ``reshard`` writes it; ``rest.Rest`` hands out a new rank's share of it.

The old ranks at their states (``OldRank``), each earlier reshard of the same epoch (``Level``:
its shares' world size, rule and what each handed out), and for best fit the windows old ranks
had begun (``FitWindow``: ``WindowAt``, a share's; ``Begun``, one with its rank), each packing
of one (``Packed``); and a batches state's schedule section (``Scheduled``, its ``Step``s).
"""

from __future__ import annotations

import itertools
from typing import Annotated

import msgspec

from openwebtext import codec
from openwebtext.codec import Count, Disagree, Positive, Record
from openwebtext.plan import Rule

__all__ = ["NOT_ACROSS", "Across", "Begun", "FitWindow", "Level", "OldRank", "Packed", "Reshard",
           "Scheduled", "Step", "WindowAt", "check_packings"]


class OldRank(Record, frozen=True, omit_defaults=True):
    """An old rank of a resharded epoch, at its state: its position and what it handed out."""

    block: Count
    in_block: Count
    handed: Count = 0
    """Documents of the epoch it handed out (unless it finished the epoch)."""
    finished: bool = False
    """It had finished the epoch (its state was at the next one's start)."""
    cut: Count = 0
    """Concat batches: ids of its next document already targets, plus one (0: none)."""
    pass_end: Count | None = None
    """Inside a pass repeating its share's documents after skips: where it ends (its state's
    ``position.pass_end``; best fit goes on with it for the window it had begun there)."""
    gap: Count = 0
    """Concat batches: the slots of documents skipped between its position and the document
    its cut is in (``BatchesState.cut_slots``; with ``ahead``, from its next epoch's start)."""
    ahead: Count = 0
    """Concat batches: the epochs past this one the document its cut is in lies in (1: the
    next; ``BatchesState.cut_next``)."""


class Packed(Record, frozen=True):
    """A packing of a best-fit window rows were handed out of: its ``seq_len`` and those rows
    (none: a window read ahead behind another, packed again at two changes of ``seq_len``
    before any of its rows went out; the first packing of a window begun holds some)."""

    seq_len: Positive
    rows: Count


class Across(Record, frozen=True, omit_defaults=True):
    """A mixture's best-fit window, of one part (``BatchesState.window_next``): the part's epoch
    ends it crosses, and its slots of the part's share of the last epoch it reaches."""

    ends: Count = 0
    slots: Count = 0

    def check(self) -> None:
        if bool(self.ends) != bool(self.slots):
            raise Disagree("slots", "of the last epoch a window reaches: some where it crosses "
                           "an epoch's end, else none")  # fmt: skip


#: No crossing: ``FitWindow.across``'s default, the one instance (a state leaves it out).
NOT_ACROSS = Across()


def check_packings(packings: tuple[Packed, ...]) -> None:
    """Raise ``Disagree`` (``packings``) if the first of a window's packings holds no row: the
    window was begun there (a later one may hold none, ``Packed``)."""
    if packings and not packings[0].rows:
        raise Disagree("packings", "the first's rows: some (the window was begun there)")


class FitWindow(Record, frozen=True, omit_defaults=True):
    """A best-fit window: its number, and the rows of it handed out."""

    number: Count
    rows: Count
    packings: tuple[Packed, ...] = ()
    """Under a schedule: its packings rows were handed out of (``Scheduled.packings``)."""
    documents: Count | None = None
    """A mixture's part: its documents in the window (None: the window's size, or fewer at the
    end of the epoch)."""
    repeats: Count = 0
    """A corpus's: its documents handed out again (``BatchesState.window_repeats``): an old
    rank's window that ran past its evened-out share into the pass repeating it (``Overrun``)."""
    slots: Count | None = None
    """A mixture's part, documents of it skipped among its own in the window: the document
    slots they lie in (``BatchesState.window_slots``), which the window deals of its share
    (None: ``documents``)."""
    across: Across = NOT_ACROSS
    """A mixture's part, the window crossing its epoch's end (a tiny part's may cross several):
    the epoch ends it crosses and its slots of the last epoch it reaches, after all those of
    its share before (``BatchesState.window_next``; none: ``ends`` 0)."""

    def check(self) -> None:
        check_packings(self.packings)

    @property
    def dealt(self) -> int | None:
        """A mixture's part: the slots of its share the window deals (None: a corpus's)."""
        return self.documents if self.slots is None else self.slots


class WindowAt(FitWindow, frozen=True, omit_defaults=True):
    """The best-fit window a share of an earlier reshard was in (``Level.windows``)."""

    replays: Count | None = None
    """A mixture's part: the windows dealt to the share not finished, this one included (a
    window may hold none of the part's documents)."""


class Begun(FitWindow, frozen=True, omit_defaults=True, kw_only=True):
    """A best-fit window an old rank had begun (``FitWindow``), and that rank."""

    rank: Count


class Level(Record, frozen=True, omit_defaults=True):
    """One earlier reshard of the epoch: its shares' world size and rule, and what each share
    handed out before this reshard."""

    world_size: Positive
    rule: Rule | None
    done: tuple[Count, ...]
    """Documents each share handed out."""
    cuts: tuple[Count, ...]
    """Concat batches: each share's cut (as ``OldRank.cut``)."""
    windows: tuple[WindowAt, ...] | None = None
    """Best fit: the window each share was in."""
    finished: tuple[Count, ...] = ()
    """The shares that had handed all of theirs out (their ranks were in a later epoch)."""
    led: tuple[Count, ...] = ()
    """A mixture's part, concat batches: the shares whose first document led (``Reshard.led``)."""
    counted: bool = True
    """Whether its last share had counted what ``drop`` left out of its rest (its
    ``Reshard.counted``) before this reshard; if not, the last share of this rest counts it."""
    gaps: tuple[Count, ...] = ()
    """Concat batches: each share's ``OldRank.gap`` (none: all 0)."""
    ahead: tuple[Count, ...] = ()
    """Concat batches: each share's ``OldRank.ahead`` (none: all 0)."""
    follows: tuple[Count, ...] = ()
    """A corpus's, concat batches: the shares whose first document followed documents their
    rank had handed out before (``Reshard.follows``; a carried cut's share, ``rest.next_section``:
    one that held documents of the epoch before), so it went on from its first id not yet a
    target."""

    def check(self) -> None:
        for name in ("finished", "led", "follows"):
            if any(s >= self.world_size for s in getattr(self, name)):
                raise Disagree(name, f"names a share past {self.world_size - 1}")
        held = [self.done, self.cuts] + ([] if self.windows is None else [self.windows])
        held += [said for said in (self.gaps, self.ahead) if said]
        if {len(shares) for shares in held} != {self.world_size}:
            raise Disagree("done", f"cuts and windows must each hold {self.world_size} shares")


class Reshard(Record, frozen=True, omit_defaults=True):
    """The ``reshard`` section of a state in the rest of a resharded epoch (``reshard``
    writes it): the old ranks at their states and this new rank's share of what they left.
    O(old ranks) integers, never a list of documents."""

    world_size: Positive
    """The old world size."""
    epoch: Count
    even: Rule | None
    """The old ranks' rule (None: not evened out)."""
    ranks: tuple[OldRank, ...]
    levels: tuple[Level, ...] = ()
    share: tuple[Count, Positive] = (0, 1)
    """``(rank, world size)`` of this share of the rest."""
    rule: Rule | None = None
    """The new ranks' rule."""
    counted: bool = True
    """Whether this share's losses were counted (the last share counts ``drop``'s)."""
    exact: tuple[bool, ...] | None = None
    """Old ranks whose position must agree exactly with their count (no skip)."""
    window: Positive | None = None
    """Best fit: documents a window holds."""
    windows: tuple[Begun, ...] | None = None
    """Best fit: the windows old ranks had begun, each to be packed again."""
    next_window: Count | None = None
    """Best fit: the number the new ranks' own windows start at."""
    led: bool = False
    """A mixture's part, concat batches: this share's first document, cut across the
    checkpoint, led the rank's stream, so it went on from the last id that was a target."""
    dealt: bool = False
    """Best fit, a later epoch's section: its ``windows`` were handed out first, in the rest
    of the first epoch (``Rest``); here their documents are only left out."""
    overrun: Count = 0
    """Best fit: documents this share handed out of old ranks' windows' overruns into passes
    repeating their shares (``overrun.Overrun``): in no slot of the rest, nor its even target."""
    later: tuple[Reshard, ...] = ()
    """The sections of the epochs after ``epoch`` an old rank had begun (a mixture's small part),
    one per epoch: their rests follow this one's, before the new world size's (``following``)."""
    follows: bool = False
    """A corpus's share, concat batches: its first document does not lead the rank's stream (a
    rest of the epoch before, handed out before it, held documents: ``Rest.following``), so a
    document cut across the checkpoint goes on from its first id not yet a target (a corpus's
    share otherwise leads: from the last id that was one)."""

    def check(self) -> None:
        if len(self.ranks) != self.world_size:
            raise Disagree("ranks", f"must hold the {self.world_size} old ranks")
        if any(s.epoch != self.epoch + 1 + k or s.later for k, s in enumerate(self.later)):
            raise Disagree("later", f"must hold the sections of epochs {self.epoch + 1} on")
        if any((s.window is None) != (self.window is None) for s in self.later):
            raise Disagree("later", "must be packed as this section is (window)")
        if self.share[0] >= self.share[1]:
            raise Disagree("share", f"{list(self.share)} is not (rank, world size)")
        if self.exact is not None and len(self.exact) != len(self.ranks):
            raise Disagree("exact", "must hold one flag per old rank")
        if self.window is not None and None in (self.windows, self.next_window):
            raise Disagree("windows", "and next_window are needed by a best-fit section")
        fits = [self.windows, *(level.windows for level in self.levels)]
        if self.window is None and any(w is not None for w in fits):
            raise Disagree("window", "is needed by a section with best-fit windows")
        if any(b.rank >= self.world_size for b in self.windows or ()):
            raise Disagree("windows", f"name an old rank past {self.world_size - 1}")
        held = [w.documents or 0 for f in fits for w in f or ()]
        if self.window is not None and max(held, default=0) > self.window:
            raise Disagree("windows", f"hold more documents than a window's {self.window}")
        if any(w.slots is not None and w.slots <= (w.documents or 0)
               for f in fits for w in f or ()):  # fmt: skip
            raise Disagree("windows", "say slots of a part's documents only where some of them "
                           "were skipped (more than its documents)")  # fmt: skip

    def following(self) -> Reshard | None:
        """The section of the next epoch's rest (``later``'s first, as this share's), or None:
        the next epoch is the new world size's own."""
        if not self.later:
            return None
        return codec.replace(self.later[0], later=self.later[1:], share=self.share, rule=self.rule,
                             counted=False, dealt=self.window is not None, led=False,
                             follows=False, overrun=0)  # fmt: skip

    def base(self) -> Reshard:
        """The section without this share: what every share of one reshard has in common."""
        return codec.replace(self, share=(0, 1), rule=None, counted=True, dealt=False, led=False,
                             follows=False, overrun=0)


class Step(Record, frozen=True):
    """A step of a schedule: from batch ``batch`` on, batches of ``batch_size`` rows of
    ``seq_len + 1`` ids."""

    batch: Count
    seq_len: Positive
    batch_size: Positive


class Scheduled(Record, frozen=True, omit_defaults=True):
    """The schedule section of a batches state whose shapes change (absent for fixed sizes):
    the steps after the first (whose shape is the state's ``seq_len`` and ``batch_size``) and
    where the run is in them."""

    changes: Annotated[tuple[Step, ...], msgspec.Meta(min_length=1)]
    """At least one (a schedule of one step is fixed sizes: no section)."""
    at: Count
    """Batches of the schedule handed out before (a resharded state keeps the old ranks')."""
    packings: tuple[Packed, ...] = ()
    """Best fit: the packings rows of the next batch's window were handed out of, oldest first
    (packed again at each change of ``seq_len``); the last's rows are ``row``; none at its start."""

    def check(self) -> None:
        batches = [step.batch for step in self.changes]
        if any(b <= a for a, b in itertools.pairwise([0, *batches])):
            raise Disagree("changes", f"must be at increasing batches after 0, not {batches}")
        check_packings(self.packings)
