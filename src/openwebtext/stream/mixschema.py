"""What a running mixture reports and remembers cheaply: ``MixtureStats`` (the parts' counts,
summed and by name), ``MixMark`` (a mark per part; its state is ``schema.MixtureState``) and
``MixRun`` (documents handed out together, what the packers read, with each one's part)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
import numpy as np

from openwebtext.stream.counters import Counters
from openwebtext.stream.schema import Change, MixtureConfig, Replay
from openwebtext.stream.state import Mark, Stats

__all__ = ["MixMark", "MixRun", "MixtureStats"]


class MixtureStats(Stats, frozen=True):
    """A mixture's counts: the parts' summed, and each part's under its name (``parts``)."""

    parts: dict[str, Stats] = msgspec.field(default_factory=dict)
    epochs: dict[str, int] = msgspec.field(default_factory=dict)
    """Each part's epoch: of the last document it handed out (or where it starts)."""


class Pending:
    """The changes of weights ``set_weights`` recorded that a mark's weights do not include yet,
    as a chain of links: the stream holds its first link not applied, each mark the one it was
    taken at; ``set`` fills the stream's (those after it are dropped: they would apply here or
    later, never in force) and opens an empty one after it. A change no mark holds any more is
    let go: a stream reweighted at every step keeps what its live marks need, not every change.
    """

    __slots__ = ("after", "change")

    def __init__(self, changes: Sequence[Change] = ()) -> None:
        self.change: Change | None = None
        self.after: Pending | None = None
        link = self
        for change in changes:
            link = link.set(change)

    def set(self, change: Change) -> Pending:
        """Record ``change`` here, dropping what was after it; the new empty link after it."""
        self.change, self.after = change, Pending()
        return self.after

    def following(self) -> Pending:
        """The link after this one, once its change is applied."""
        assert self.after is not None, "an empty link is never applied"
        return self.after

    def changes(self) -> tuple[Change, ...]:
        """The changes from this link on, in order."""
        found, link = [], self
        while link.change is not None and link.after is not None:
            found.append(link.change)
            link = link.after
        return tuple(found)

    def __reduce__(self) -> tuple[type[Pending], tuple[tuple[Change, ...]]]:
        """Copied (``pickle``, ``copy.deepcopy``) as its changes, not link by link: a chain of
        thousands would pass the recursion limit."""
        return Pending, (self.changes(),)


class MixMark(NamedTuple):
    """Where a mixture was (``MixedStream.mark``), cheaply: each part's stream mark (before
    the document it read ahead), the rank's position and the turns' counts."""

    parts: tuple[Mark, ...]
    handed: int
    weights: tuple[float, ...]
    served: tuple[int, ...]
    pending: Pending
    """The changes of weights recorded that the weights and counts do not include."""
    next: int | None = None
    """The part of the next document, where it was already chosen (``MixRun.mark_before``)."""
    replays: tuple[Replay, ...] = ()
    """The dealt best-fit windows not yet handed out whole (``MixtureState.replays``)."""
    config: MixtureConfig | None = None
    """The config of the mixture that took it: a mark is a state of its run's only."""

    def of(self, config: MixtureConfig) -> tuple[Mark, ...]:
        """Its parts' marks, for a state of a mixture of ``config`` (each part checks its own).

        Raises:
            ValueError: the mark is of another mixture.
        """
        if self.config != config:
            raise ValueError("mark is a mark() of an iterator of another run: a state is its own")
        return self.parts

    @property
    def epoch(self) -> int:
        """0: a mixture has no epoch of its own (its parts have theirs); best fit numbers its
        windows from the mixture's start."""
        return 0

    def counted(self) -> Counters:
        """The parts' counts at this mark, summed (documents, text bytes, ids)."""
        each = [m.counted() for m in self.parts]
        return Counters(
            documents=sum(c.documents for c in each),
            text_bytes=sum(c.text_bytes for c in each),
            tokens=sum(c.tokens for c in each),
        )


class MixRun:
    """Token documents of a mixture handed out together (``DocumentSource.next_run``), in the
    order they go out, their ids end to end; never across a change of weights.

    Args:
        ids: The documents' ids, one after another.
        lengths: Each document's ids.
        parts: Each document's part (its index in the mixture).
        afters: Each document's part's stream mark after it.
        before: The mixture's mark before the first document.
        by_tokens: The turns count ids (else documents).
        settled: ``before`` with the change of weights due at the run's start applied (the
            weights the run's documents were chosen by); None: ``before``.
        replays: A run of a dealt best-fit window (``Replay``): the replays after each of its
            documents (the rank's own turns do not move); None: the rank's own turns.
        begins: Where each document's ids begin in it: 0, but for a part's document cut
            across a resharded checkpoint of batches (None: 0 for all).
    """

    def __init__(
        self,
        ids: np.ndarray[Any, Any],
        lengths: np.ndarray[Any, Any],
        parts: np.ndarray[Any, Any],
        afters: list[Mark],
        before: MixMark,
        by_tokens: bool,
        settled: MixMark | None = None,
        replays: list[tuple[Replay, ...]] | None = None,
        begins: np.ndarray[Any, Any] | None = None,
    ) -> None:
        self.ids = ids
        self.lengths = lengths
        self.starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self.parts = parts
        """Each document's part, by its index in the mixture's parts."""
        self._afters = afters
        self.before = before
        self._settled = before if settled is None else settled
        self._by_tokens = by_tokens
        self._replays = replays
        self.begins = np.zeros(len(lengths), np.int64) if begins is None else begins
        """Where each document's ids begin in it (``TokenRun.start``, per document)."""
        self.after = self.mark_before(len(lengths))

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def epoch(self) -> int:
        return 0

    @property
    def start(self) -> int:
        """Where the first document's ids begin in it (``TokenRun.start``)."""
        return int(self.begins[0]) if len(self.begins) else 0

    def mark_before(self, j: int) -> MixMark:
        """The mixture's mark before document ``j`` (``j == len(self)``: after the last)."""
        if j == 0:
            following = int(self.parts[0]) if len(self.parts) else None
            return self.before._replace(next=following)
        b = self._settled
        marks = list(b.parts)
        served = list(b.served)
        for k in range(j):
            part = int(self.parts[k])
            marks[part] = self._afters[k]
            served[part] += int(self.lengths[k]) if self._by_tokens else 1
        following = int(self.parts[j]) if j < len(self.parts) else None
        if self._replays is not None:  # a dealt window's: the old rank's turns moved
            return b._replace(parts=tuple(marks), next=following, replays=self._replays[j - 1])
        return MixMark(tuple(marks), b.handed + j, b.weights, tuple(served), b.pending, following,
                       config=b.config)  # fmt: skip

    def part_after(self, j: int) -> Mark:
        """The stream mark of document ``j``'s part after it."""
        return self._afters[j]

    def end_to_end(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The documents' ids one after another, and where each ends in them."""
        return self.ids, np.cumsum(self.lengths)
