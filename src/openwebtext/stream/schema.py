"""The records of a saved state (format 2), decoded and checked once by ``codec``.

A state crosses the boundary as JSON (``state_dict()`` returns it, ``iter(state=…)`` and
``batches(state=…)`` take it, ``owt stream --state-out`` writes it). Inside it is one of
these frozen records: ``from_json`` checks every field by its annotation and the fields
against each other (each record's ``check``), naming the first wrong one in a ``StateError``;
``to_json`` is the inverse. The records nest as the streams do: a ``BatchesState`` holds the
``DocumentState`` of the documents it packs, which holds its ``StreamConfig``, ``Position``,
``Counters`` and, in the rest of a resharded epoch, its ``Reshard`` section (the old ranks as
``OldRank`` records, one ``Level`` per earlier reshard).
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from openwebtext import codec
from openwebtext.codec import Count, Disagree, Fraction, Positive, Record
from openwebtext.stream.counters import Counters

__all__ = [
    "BATCHES_FORMAT",
    "STATE_FORMAT",
    "BatchesState",
    "Begun",
    "Counters",
    "DocumentState",
    "Level",
    "OldRank",
    "Packing",
    "Position",
    "Reshard",
    "Rule",
    "StreamConfig",
    "WindowAt",
]

STATE_FORMAT = "openwebtext-state/2"
BATCHES_FORMAT = "openwebtext-batches/2"

#: How ranks are evened out: ``drop`` the documents past the smallest count, or ``pad``.
Rule: TypeAlias = Literal["drop", "pad"]
#: How batches are packed: end to end, or best fit in windows of documents.
Packing: TypeAlias = Literal["concat", "bestfit"]


class StreamConfig(Record, frozen=True):
    """What a state must agree with to resume: the corpus (its fingerprint and units) and the
    options that shape the stream (``options.SHAPING``; ``even`` is the rule in force)."""

    corpus: str
    units: Count
    shuffle: bool
    seed: Count
    shuffle_buffer: Count
    rank: Count
    world_size: Positive
    even: Rule | None
    split: Literal["all", "train", "val"]
    val_fraction: Fraction
    val_seed: Count
    max_document_bytes: Positive
    decode_errors: Literal["strict", "replace"]
    tokenizer: str | None = None
    """The vocabulary's fingerprint when the stream hands out ids."""

    def check(self) -> None:
        if self.rank >= self.world_size:
            raise Disagree("rank", f"is {self.rank}, not below world_size {self.world_size}")


class Position(Record, frozen=True):
    """Where a stream is: the epoch, the plan position of the first unit of the current
    shuffle block, and how many of that block's documents were handed out."""

    epoch: Count = 0
    block: Count = 0
    in_block: Count = 0


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


class WindowAt(Record, frozen=True):
    """A best-fit window: its number, and the rows of it handed out."""

    number: Count
    rows: Count


class Begun(Record, frozen=True):
    """A best-fit window an old rank had begun: the rank, the window's number, rows handed out."""

    rank: Count
    number: Count
    rows: Count


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

    def check(self) -> None:
        lengths = {len(self.done), len(self.cuts)}
        if self.windows is not None:
            lengths.add(len(self.windows))
        if lengths != {self.world_size}:
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

    def check(self) -> None:
        if len(self.ranks) != self.world_size:
            raise Disagree("ranks", f"must hold the {self.world_size} old ranks")
        if self.share[0] >= self.share[1]:
            raise Disagree("share", f"{list(self.share)} is not (rank, world size)")
        if self.exact is not None and len(self.exact) != len(self.ranks):
            raise Disagree("exact", "must hold one flag per old rank")
        best_fit = self.window is not None
        for name in ("windows", "next_window"):
            if best_fit and getattr(self, name) is None:
                raise Disagree(name, "is needed by a best-fit section")
        if self.windows is not None and not best_fit:
            raise Disagree("window", "is needed by a best-fit section")
        if any(level.windows is not None and not best_fit for level in self.levels):
            raise Disagree("levels", "of best fit in a section of concat")
        if any(b.rank >= self.world_size for b in self.windows or ()):
            raise Disagree("windows", f"name an old rank past {self.world_size - 1}")

    def base(self) -> Reshard:
        """The section without this share: what every share of one reshard has in common."""
        return codec.replace(self, share=(0, 1), rule=None, counted=True)


class DocumentState(Record, frozen=True, omit_defaults=True, tag_field="format", tag=STATE_FORMAT):
    """A document stream's state (``DocumentIterator.state_dict()``): what it was opened with
    (``config``), where it is, its counts, and in a resharded epoch its ``reshard`` section."""

    config: StreamConfig
    position: Position
    counters: Counters
    reshard: Reshard | None = None

    def check(self) -> None:
        if self.reshard is not None:  # the share's position is checked against its pieces
            return
        position, counters = self.position, self.counters
        handed = counters.epoch_documents
        if position.in_block > handed:
            raise Disagree(
                "position", f"in_block={position.in_block} is more than the "
                f"counters.epoch_documents={handed} handed out in the epoch"
            )
        if handed > counters.documents:
            raise Disagree(
                "counters", f"epoch_documents={handed} is more than documents={counters.documents}"
            )
        if self.config.even is None and position.block > self.config.units:
            raise Disagree(
                "position", f"block={position.block} is past the corpus's {self.config.units} units"
            )

    @classmethod
    def from_json(cls, state: Any) -> DocumentState:
        """Raises: StateError: not a state of this format, or naming the first wrong field."""
        return codec.decode(state, cls)

    def to_json(self) -> dict[str, Any]:
        return codec.encode(self)


class BatchesState(Record, frozen=True, tag_field="format", tag=BATCHES_FORMAT):
    """A ``Loader.batches`` state: the state of the documents it packs (before the document
    the next batch starts in), and where in them the next batch starts."""

    seq_len: Positive
    batch_size: Positive
    documents: DocumentState
    offset: Count = 0
    """Ids of the next document already in batches (concat)."""
    batches: Count = 0
    """Batches handed out before."""
    packing: Packing = "concat"
    window: Positive | None = None
    """Best fit: documents packed at a time."""
    window_number: Count = 0
    """Best fit: the window the next batch is in."""
    row: Count = 0
    """Best fit: rows of that window handed out."""
    window_epoch: Count | None = None
    """Best fit: the epoch the window's number counts in (None: the documents')."""

    def check(self) -> None:
        if self.packing == "bestfit" and self.window is None:
            raise Disagree("window", "is needed by best fit")
        if self.packing == "concat" and self.window is not None:
            raise Disagree("packing", "is concat, but the state has a best-fit window")

    @classmethod
    def from_json(cls, state: Any) -> BatchesState:
        """Raises: StateError: not a batches state, or naming the first wrong field."""
        return codec.decode(state, cls, "batches state")

    def to_json(self) -> dict[str, Any]:
        return codec.encode(self)

    @property
    def cut(self) -> int:
        """Concat: ids of the next document already targets, plus one (0: none)."""
        return self.offset + 1 if self.batches > 0 else 0
