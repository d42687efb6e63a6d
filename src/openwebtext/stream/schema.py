"""The records of a saved state (format 2), decoded and checked once by ``codec``.

A state crosses the boundary as JSON (``state_dict()``, ``iter(state=…)``, ``batches(state=…)``,
``owt stream --state-out``); inside it is one of these frozen records, ``from_json`` checking
every field by its annotation and each record's ``check``. They nest as the streams do: a
``BatchesState`` holds the ``DocumentState`` it packs (a corpus's: ``StreamConfig``,
``Position``, ``Counters``, a resharded epoch's ``Reshard``) or a ``MixtureState`` (its
``MixtureConfig`` and each part's ``DocumentState`` by name).
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeAlias

import msgspec

from openwebtext import codec
from openwebtext.codec import Count, Disagree, Fingerprint, Fraction, Positive, Record
from openwebtext.mixing import check_weights
from openwebtext.options import DecodePolicy, SplitName
from openwebtext.plan import Rule
from openwebtext.stream.counters import Counters, PackingCounts, PartPacking

__all__ = [
    "BATCHES_FORMAT",
    "MIXTURE_FORMAT",
    "STATE_FORMAT",
    "BatchesState",
    "Begun",
    "By",
    "Change",
    "Counters",
    "DocumentState",
    "Level",
    "MixtureConfig",
    "MixtureState",
    "OldRank",
    "Packed",
    "Packing",
    "Position",
    "Replay",
    "Reshard",
    "Rule",
    "Sampling",
    "Scheduled",
    "Step",
    "StreamConfig",
    "WindowAt",
    "kind_of",
]

STATE_FORMAT = "openwebtext-state/2"
BATCHES_FORMAT = "openwebtext-batches/2"

#: How batches are packed: end to end, or best fit in windows of documents.
Packing: TypeAlias = Literal["concat", "bestfit"]


class StreamConfig(Record, frozen=True):
    """What a state must agree with to resume: the corpus (its fingerprint and units) and the
    options that shape the stream (``options.SHAPING``; ``even`` is the rule in force)."""

    corpus: Fingerprint
    units: Count
    shuffle: bool
    seed: Count
    shuffle_buffer: Count
    rank: Count
    world_size: Positive
    even: Rule | None
    split: SplitName
    val_fraction: Fraction
    val_seed: Count
    max_document_bytes: Positive
    decode_errors: DecodePolicy
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


class Packed(Record, frozen=True):
    """A packing of a best-fit window rows were handed out of: its ``seq_len`` and those rows."""

    seq_len: Positive
    rows: Positive


class WindowAt(Record, frozen=True, omit_defaults=True):
    """A best-fit window: its number, and the rows of it handed out."""

    number: Count
    rows: Count
    packings: tuple[Packed, ...] = ()
    """Under a schedule: its packings rows were handed out of (``Scheduled.packings``)."""
    documents: Count | None = None
    """A mixture's part: its documents in the window (None: the window's size, or fewer at the
    end of the epoch)."""
    replays: Count | None = None
    """A mixture's part, the window a share of a resharded epoch was in: the windows dealt to
    it not finished, this one included (a window may hold none of the part's documents)."""


class Begun(WindowAt, frozen=True, omit_defaults=True, kw_only=True):
    """A best-fit window an old rank had begun (``WindowAt``), and that rank."""

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

    def check(self) -> None:
        for name in ("finished", "led"):
            if any(s >= self.world_size for s in getattr(self, name)):
                raise Disagree(name, f"names a share past {self.world_size - 1}")
        held = [self.done, self.cuts] + ([] if self.windows is None else [self.windows])
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
    later: tuple[Reshard, ...] = ()
    """The sections of the epochs after ``epoch`` an old rank had begun (a mixture's small part),
    one per epoch: their rests follow this one's, before the new world size's (``following``)."""

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

    def following(self) -> Reshard | None:
        """The section of the next epoch's rest (``later``'s first, as this share's), or None:
        the next epoch is the new world size's own."""
        if not self.later:
            return None
        return codec.replace(self.later[0], later=self.later[1:], share=self.share, rule=self.rule,
                             counted=False, dealt=self.window is not None, led=False)  # fmt: skip

    def base(self) -> Reshard:
        """The section without this share: what every share of one reshard has in common."""
        return codec.replace(self, share=(0, 1), rule=None, counted=True, dealt=False, led=False)


class DocumentState(Record, frozen=True, omit_defaults=True, tag_field="format", tag=STATE_FORMAT):
    """A document stream's state (``DocumentIterator.state_dict()``): what it was opened with
    (``config``), where it is, its counts, and in a resharded epoch its ``reshard`` section."""

    config: StreamConfig
    position: Position
    counters: Counters
    reshard: Reshard | None = None
    passed: tuple[Reshard, ...] = ()
    """The sections of the rests this rank handed out to their end since it was resharded,
    oldest first (``reshard`` reads them: nobody else says a rest that cuts carried into the
    next epoch made, ``Rest.next_section``)."""

    def check(self) -> None:
        if any(p.epoch >= self.position.epoch for p in self.passed):
            raise Disagree("passed", f"must be of epochs before {self.position.epoch}")
        if self.reshard is not None:  # the share's position is checked against its pieces
            return
        at, handed, units = self.position, self.counters.epoch_documents, self.config.units
        if at.in_block > handed:
            raise Disagree("position", f"in_block={at.in_block} is more than the counters."
                           f"epoch_documents={handed} handed out in the epoch")  # fmt: skip
        if handed > self.counters.documents:
            raise Disagree("counters", f"epoch_documents={handed} is more than documents="
                           f"{self.counters.documents}")  # fmt: skip
        if self.config.even is None and (at.block, bool(at.in_block)) > (units, False):
            raise Disagree("position", f"block={at.block}, in_block={at.in_block} lies past the "
                           f"end of the corpus's {units} units")  # fmt: skip


MIXTURE_FORMAT = "openwebtext-mixture/2"

By: TypeAlias = Literal["documents", "tokens"]
Sampling: TypeAlias = Literal["stratified", "random"]


def _weights(parts: int, weights: tuple[float, ...], changes: tuple[Change, ...], at: str = "",
             name: str = "changes") -> None:  # fmt: skip
    """Raise ``Disagree`` naming the first of ``weights`` and ``changes`` (``{at}weights``,
    ``{at}{name}``) not ``parts`` normalised weights (``check_weights``), or out of order."""
    if any(b.at < a.at for a, b in itertools.pairwise(changes)):
        raise Disagree(f"{at}{name}", f"must be in the order they apply: {[c.at for c in changes]}")
    named = {f"{at}{name}[{k}].weights": change.weights for k, change in enumerate(changes)}
    for field, values in {f"{at}weights": weights, **named}.items():
        try:
            normal = check_weights(values, parts)
        except ValueError as exc:
            raise Disagree(field, str(exc)) from None
        close = map(math.isclose, values, normal)  # (relative: 1e-9)
        if not all(close):
            raise Disagree(field, f"must be normalised (their sum 1), not {list(values)}")


class Change(Record, frozen=True):
    """Weights in force from ``at`` documents handed out by the rank on."""

    at: Count
    weights: tuple[float, ...]
    """Checked by the record that holds the change, against its parts."""


class MixtureConfig(Record, frozen=True):
    """What a mixture's state must agree with, besides each part's own ``config``."""

    parts: Annotated[tuple[str, ...], msgspec.Meta(min_length=1)]
    weights: tuple[float, ...]
    by: By
    sampling: Sampling
    schedule: tuple[Change, ...] = ()

    def check(self) -> None:
        if len(set(self.parts)) != len(self.parts):
            raise Disagree("parts", "must be distinct names")
        _weights(len(self.parts), self.weights, self.schedule, name="schedule")


class Replay(Record, frozen=True, omit_defaults=True):
    """A best-fit window an old rank of a mixture had begun, dealt to this rank by a reshard:
    the old rank's turns where it began (to hand its documents out in the old order), and what
    best fit needs to pack it again the same way (its number, rows handed out, packings)."""

    rank: Count
    """The old rank (random sampling draws by it)."""
    handed: Count
    weights: tuple[float, ...]
    served: tuple[Count, ...]
    left: tuple[Count, ...]
    """Documents of each part of the window not yet handed out."""
    documents: Positive
    """Documents the window holds."""
    number: Count
    rows: Count
    changes: tuple[Change, ...] = ()
    packings: tuple[Packed, ...] = ()

    def check(self) -> None:
        if sum(self.left) > self.documents:
            raise Disagree("left", f"counts more than the window's {self.documents} documents")


class MixtureState(Record, frozen=True, tag_field="format", tag=MIXTURE_FORMAT):
    """A mixture's state: its config, each part's state by name, and where the turns are."""

    what = "mixture state"
    config: MixtureConfig
    parts: dict[str, DocumentState]
    handed: Count
    """Documents the rank has handed out (the positions of the schedule count these)."""
    weights: tuple[float, ...]
    """The weights in force."""
    served: tuple[Count, ...]
    """What each part has handed out since the weights were last set (documents or ids)."""
    changes: tuple[Change, ...] = ()
    """The ``set_weights`` not yet applied (the applied are in ``weights`` and ``served``), in
    order, each applied when the rank reaches its ``at``."""
    applied: Count = 0
    """How many of ``changes`` the ``weights`` and ``served`` include (0 in what this version
    writes: the applied changes are left out)."""
    next: Count | None = None
    """The part (index) of the next document, where it was chosen before the state was taken
    (concat batches: the next batch starts inside it; a reshard gives its shares the cut)."""
    replays: tuple[Replay, ...] | msgspec.UnsetType = msgspec.UNSET
    """Best fit after a reshard: the windows old ranks had begun that this rank hands out
    first, in order (the first may be under way); the proportions count after them."""

    def check(self) -> None:
        names, n = self.config.parts, len(self.config.parts)
        replays = {f"replays[{k}].": replay for k, replay in enumerate(self.replays or ())}
        counted = {at + f: getattr(r, f) for at, r in replays.items() for f in ("served", "left")}
        for field, values in {**counted, "served": self.served}.items():
            if len(values) != n:
                raise Disagree(field, f"must count each of the {n} parts")
        turns: dict[str, Replay | MixtureState] = {**replays, "": self}
        for at, record in turns.items():
            _weights(n, record.weights, record.changes, at)
        if self.next is not None and self.next >= n:
            raise Disagree("next", f"is {self.next}, not a part's index (< {n})")
        if set(self.parts) != set(names):  # JSON's objects are unordered
            raise Disagree("parts", f"names {sorted(self.parts)}, not the config's {list(names)}")
        if self.applied > len(self.changes):
            raise Disagree("applied", f"is more than the {len(self.changes)} changes")
        states = [self.parts[name].counters for name in names]
        if self.replays or any(p.reshard or p.passed for p in self.parts.values()):
            return  # (a reshard's turns start from old rank 0's, each part's counts from 0)
        documents = sum(c.documents for c in states)
        if self.handed != documents:
            raise Disagree("handed", f"is {self.handed}, not the {documents} documents its "
                           "parts handed out")  # fmt: skip
        each = [c.tokens if self.config.by == "tokens" else c.documents for c in states]
        if any(map(operator.gt, self.served, each)):
            raise Disagree("served", f"{list(self.served)} counts more than its parts handed "
                           f"out ({each})")  # fmt: skip


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


class BatchesState(Record, frozen=True, tag_field="format", tag=BATCHES_FORMAT):
    """A ``Loader.batches`` state: the state of the documents it packs (before the document
    the next batch starts in), and where in them the next batch starts."""

    what = "batches state"
    seq_len: Positive
    batch_size: Positive
    documents: DocumentState | MixtureState
    """The documents' state: a corpus's, or a mixture's."""
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
    schedule: Scheduled | msgspec.UnsetType = msgspec.UNSET
    """Shapes that change: the schedule and where the run is in it (absent: fixed sizes)."""
    packed: PackingCounts = PackingCounts()
    """What packing did to the documents of the batches handed out before."""
    packed_parts: dict[str, PartPacking] | msgspec.UnsetType = msgspec.UNSET
    """A mixture's: ``packed`` per part, the parts with none left out (padding is no part's)."""
    window_parts: tuple[Count, ...] | msgspec.UnsetType = msgspec.UNSET
    """Best fit of a mixture, rows of the window handed out: its documents of each part (a
    reshard deals the window to a new rank, which hands them out in the old order)."""
    window_documents: Positive | msgspec.UnsetType = msgspec.UNSET
    """Best fit, rows of the window out: its documents, the run having ended before it was whole."""

    def check(self) -> None:
        docs = self.documents
        short = self.window_documents
        if isinstance(short, int) and not (self.row and self.window and short < self.window):
            raise Disagree("window_documents", "is a best-fit window's, cut short, rows out")
        names = docs.config.parts if isinstance(docs, MixtureState) else ()
        counted, out = self.window_parts or (), bool(self.row and self.window)
        if (names and out and not counted) or (counted and not out):
            raise Disagree("window_parts", "counts a mixture's best-fit window, rows out, only")
        held, most = sum(counted), self.window or 0  # (a mixture's window out holds some)
        if counted and (len(counted) != (len(names) or 1) or not bool(names) <= held <= most):
            raise Disagree("window_parts", f"must count each part's documents (a part's state: "
                           f"its own) of a window of at most {self.window}")  # fmt: skip
        unknown = set(self.packed_parts or ()).difference(names)
        if unknown:
            raise Disagree("packed_parts", f"name {sorted(unknown)}, not the mixture's parts")
        if self.packing == "bestfit" and self.window is None:
            raise Disagree("window", "is needed by best fit")
        if self.packing == "concat" and self.window is not None:
            raise Disagree("packing", "is concat, but the state has a best-fit window")
        packings = () if self.scheduled is None else self.scheduled.packings
        if packings and (self.packing != "bestfit" or packings[-1].rows != self.row):
            raise Disagree("schedule", "packings: the last's rows must be the best-fit row")
        parts = docs.parts.values() if isinstance(docs, MixtureState) else [docs]
        dealt = isinstance(docs, MixtureState) and isinstance(docs.replays, tuple)
        resharded = dealt or any(p.reshard or p.passed for p in parts)
        at = None if self.scheduled is None else self.scheduled.at
        if at is not None and at != self.batches and not resharded:  # (a reshard's: the old's)
            raise Disagree("schedule", f"at={at} is not batches={self.batches}: a state never "
                           "resharded is at its own batch of the schedule")  # fmt: skip

    @property
    def scheduled(self) -> Scheduled | None:
        """The schedule section (None: fixed sizes)."""
        return self.schedule if isinstance(self.schedule, Scheduled) else None

    @property
    def cut(self) -> int:
        """Concat: ids of the next document already targets, plus one (0: none)."""
        return self.offset + 1 if self.batches > 0 else 0


def kind_of(value: Any) -> type[DocumentState | MixtureState | BatchesState] | None:
    """The record a saved state is, by its ``format`` (read before the state is decoded, and
    only here); None: not an object, or of no state format (whatever its ``format`` holds)."""
    found = value.get("format") if isinstance(value, Mapping) else None
    kinds: dict[str, type[DocumentState | MixtureState | BatchesState]] = {
        STATE_FORMAT: DocumentState, MIXTURE_FORMAT: MixtureState, BATCHES_FORMAT: BatchesState
    }  # fmt: skip
    return kinds.get(found) if isinstance(found, str) else None
