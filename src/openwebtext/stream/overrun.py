"""The overrun of a best-fit window an old rank had begun: the part of it past the slots of
the old rank's evened-out share, in the pass repeating that share's documents that skips sent
the rank into (``epochs.EvenEpoch``).

A reshard deals an old rank's begun window as slots of the rest sequence (``rest.Rest``), but
a window that ran past its share's end went on with the repeating pass's first documents,
which are in no old rank's rest: packed without them, the window's rows differ from those the
old rank handed out of, and a document of it is lost. The old rank's batches state says how
many of its window's documents were repeats (``BatchesState.window_repeats``, ``Begun.repeats``):
then the rest sequence holds, after that rank's remaining slots, an overrun of the window's
other slots (``Overrun``), which the new rank the window is dealt to hands out as the old rank
would have: its passes from the share's end (or from the old rank's position, inside such a
pass already), cut at its even target and at the window's slots, its documents repeats
(counted). The overrun holds no slot of the new share's own: its documents are counted apart
(``Reshard.overrun``), so that its even target leaves them out, and the slots it did not fill
are passed as skipped ones, so that the window ends where the old rank's did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from openwebtext.errors import StateError
from openwebtext.plan import Share, even_end, pass_end
from openwebtext.stream.sections import Begun, OldRank

__all__ = ["Overrun", "OverrunPasses", "overrun_of"]


class Overrun(NamedTuple):
    """The overrun of the best-fit window old rank ``rank`` had begun (module doc)."""

    rank: int
    old: OldRank
    target: int
    """The old rank's even target (its share's documents)."""
    first: int
    """The window's slots before it: the rest of the old share (0: the old rank was inside a
    pass repeating its documents already)."""
    repeats: int
    """Its documents, as the old rank's state says."""


def overrun_of(
    rank: int, old: OldRank, window: Begun | None, share: Share, remaining: int, size: int
) -> Overrun | None:
    """The overrun of old rank ``rank``'s window (None: none), ``remaining`` slots of its
    ``share`` left at its state, ``size`` the slots of a window.

    Raises:
        StateError: the state says repeats of a window that cannot hold any.
    """
    if window is None or not window.repeats:
        return None
    if remaining >= size or window.documents is not None or share.counts is None:
        raise StateError(
            f"bad batches state: old rank {rank}'s best-fit window holds {window.repeats} "
            f"documents handed out again, but it ends inside its share ({remaining} of its "
            "slots left) or is a mixture part's"
        )  # fmt: skip
    return Overrun(rank, old, share.documents, remaining, window.repeats)


class OverrunPasses:
    """The passes an overrun's documents are read in (``over``, of ``slots`` slots of the old
    share's ``counts``, ``into`` of them passed; ``kept``: the old rank, slots and documents of
    the piece before it, the window's slots of the old share when read here from its start;
    ``before``: the epoch documents handed out): those the old rank would have read from its
    share's end (or its position inside such a pass), cut at its even target and the slots.

    Raises:
        StateError: the window was not read from its start here.
    """

    def __init__(self, over: Overrun, counts: Sequence[int], slots: int, into: int,
                 kept: tuple[int, int, int], before: int) -> None:  # fmt: skip
        if into or (over.first and kept[:2] != (over.rank, over.first)):
            raise StateError("bad batches state: inside a best-fit window dealt by a reshard "
                             "(its overrun into a pass repeating documents)", field="reshard")
        self.over, self.counts, self.slots, old = over, counts, slots, over.old
        self.block, self.in_block, self.handed, self.ends = (
            old.block, old.in_block, old.handed, old.pass_end)
        if over.first:  # the old rank's first pass ended at its share's end: the next repeats
            self.block, self.in_block, self.handed, self.ends = (
                len(self.counts), 0, old.handed + kept[2], None)
        self.before = self.documents = before
        self.repeats = even_end(self.counts, over.target)  # (where passes repeat)
        self.passed, self.end = -1, self.block

    def next(self, documents: int, passed: int) -> tuple[int, int, int, int, int, bool] | None:
        """The next pass, the epoch's ``documents`` handed out and the overrun's slots
        ``passed`` now: ``(start, end, in_block, documents left, slots left, repeat)``, or
        None: the overrun is out."""
        if self.passed >= 0:  # (the pass before: ended)
            self.handed += documents - self.documents
            self.block, self.in_block = self.end, 0
            if passed == self.passed:  # (nothing in it: a share of no slots)
                return None
        self.documents, self.passed = documents, passed
        if self.handed >= self.over.target or passed >= self.slots:
            return None
        end = pass_end(self.counts, self.block, self.over.target - self.handed + self.in_block)
        self.end, self.ends = (self.ends if self.ends is not None and self.ends > self.block
                               else end), None  # fmt: skip
        return (self.block, self.end, self.in_block, self.over.target - self.handed,
                self.slots - passed, self.block >= self.repeats)

    def handed_out(self, documents: int) -> int:
        """The overrun's documents, the epoch's ``documents`` handed out at its end.

        Raises:
            StateError: not as many as the old rank's state says.
        """
        got = documents - self.before
        if got != self.over.repeats:
            raise StateError(f"bad batches state: old rank {self.over.rank}'s best-fit window "
                             f"holds {self.over.repeats} documents handed out again, but the "
                             f"pass repeating its share holds {got} of it", field="reshard")
        return got
