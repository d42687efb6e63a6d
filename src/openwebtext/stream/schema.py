"""The records of a saved state (format 2), decoded and checked once by ``codec``.

A state crosses the boundary as JSON (``state_dict()``, ``iter(state=…)``, ``batches(state=…)``,
``owt stream --state-out``); inside it is one of these frozen records, ``from_json`` checking
every field by its annotation and each record's ``check``. They nest as the streams do: a
``BatchesState`` holds the ``DocumentState`` it packs (a corpus's: ``StreamConfig``,
``Position``, ``Counters``, a resharded epoch's ``sections.Reshard``) or a ``MixtureState`` (its
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
from openwebtext.errors import StateError
from openwebtext.mixing import TAKEN_SHARE, check_weights
from openwebtext.options import DecodePolicy, SplitName
from openwebtext.plan import Rule
from openwebtext.stream.counters import BlockSkips, Counters, PackingCounts, PartPacking
from openwebtext.stream.sections import Across, Packed, Reshard, Scheduled, Step, check_packings

__all__ = [
    "BATCHES_FORMAT", "MIXTURE_FORMAT", "STATE_FORMAT", "BatchesState", "By", "Change",
    "Counters", "DocumentState", "MixtureConfig", "MixtureState", "Packing", "Position", "Replay",
    "Sampling", "Scheduled", "Step", "StreamConfig", "kind_of",
]  # fmt: skip

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
    seed: codec.Seed
    shuffle_buffer: Count
    rank: Count
    world_size: Positive
    even: Rule | None
    split: SplitName
    val_fraction: Fraction
    val_seed: codec.Seed
    max_document_bytes: Positive
    decode_errors: DecodePolicy
    tokenizer: str | None = None
    """The vocabulary's fingerprint when the stream hands out ids."""

    def check(self) -> None:
        if self.rank >= self.world_size:
            raise Disagree("rank", f"is {self.rank}, not below world_size {self.world_size}")
        codec.check_key(self.val_seed)


class Position(Record, frozen=True):
    """Where a stream is: the epoch, the plan position of the first unit of the current
    shuffle block, and how many of that block's documents were handed out."""

    epoch: Count = 0
    block: Count = 0
    in_block: Count = 0
    pass_end: Count | msgspec.UnsetType = msgspec.UNSET
    """Inside a pass repeating an evened-out share's documents after skips (past its start,
    ``epochs.EvenEpoch``): the plan position where the pass ends, which depends on where it
    began (``epochs.check_pass_end`` checks it against the share); absent elsewhere."""

    def check(self) -> None:
        if isinstance(self.pass_end, int) and (self.pass_end, 0) < (self.block, self.in_block):
            raise Disagree("pass_end", f"is {self.pass_end}: a pass ends past the position in it "
                           f"(block={self.block}, in_block={self.in_block})")  # fmt: skip


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
    next epoch made, ``rest.next_section``)."""
    block_skips: BlockSkips | None = None
    """Inside a block whose units counted skips: those, left out of ``counters``."""
    until: Count | msgspec.UnsetType | None = msgspec.UNSET
    """The epoch its run ends before (None: without end; a mixture's part: absent)."""

    def check(self) -> None:
        at, config, section = self.position, self.config, self.reshard
        handed, units = self.counters.epoch_documents, config.units
        if any(p.epoch >= at.epoch for p in self.passed):
            raise Disagree("passed", f"must be of epochs before {at.epoch}")
        if handed > self.counters.documents:
            raise Disagree("counters", f"epoch_documents={handed} is more than documents="
                           f"{self.counters.documents}")  # fmt: skip
        # Counted from the run's start (a reshard's: the first rest's), nothing before epoch 0.
        if (at.epoch == 0 or (section and not self.passed)) and handed != self.counters.documents:
            raise Disagree("counters", f"epoch_documents={handed} is not documents="
                           f"{self.counters.documents}: no epoch came before")  # fmt: skip
        if isinstance(at.pass_end, int) and (section or not config.even or not handed
                                              or not self.counters.skips):  # fmt: skip
            raise Disagree("position.pass_end", "is the end of a pass repeating documents after "
                           "skips: in an evened-out epoch, not in a rest")  # fmt: skip
        if section is not None:  # the share's position is checked against its pieces
            if section.share != (config.rank, config.world_size) or section.rule != config.even:
                raise Disagree("reshard", "share and rule must be the config's rank, world_size "
                               f"and even: {list(section.share)}, {section.rule!r}")  # fmt: skip
            if (at.epoch, at.block) != (section.epoch, 0):  # (in_block: skipped slots passed)
                raise Disagree("position", f"of a rest must be its epoch {section.epoch}'s start")
            if section.overrun > handed:
                raise Disagree("reshard.overrun", f"is more than epoch_documents={handed}")
            return
        if at.in_block > handed:
            raise Disagree("position", f"in_block={at.in_block} is more than the counters."
                           f"epoch_documents={handed} handed out in the epoch")  # fmt: skip
        if config.even is None and (at.block, bool(at.in_block)) > (units, False):
            raise Disagree("position", f"block={at.block}, in_block={at.in_block} lies past the "
                           f"end of the corpus's {units} units")  # fmt: skip

    @property
    def resharded(self) -> bool:
        """In the rest of a resharded epoch, or past one (its counts start from the reshard)."""
        return self.reshard is not None or bool(self.passed)


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
            normal = check_weights(values, parts, least=TAKEN_SHARE)
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
        check_packings(self.packings)


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
    next: Count | None = None
    """The part (index) of the next document, where it was chosen before the state was taken
    (concat batches: the next batch starts inside it; a reshard gives its shares the cut)."""
    replays: tuple[Replay, ...] | msgspec.UnsetType = msgspec.UNSET
    """Best fit after a reshard: the windows old ranks had begun that this rank hands out
    first, in order (the first may be under way); the proportions count after them."""
    until: Count | msgspec.UnsetType | None = msgspec.UNSET
    """The epoch the run that took the state ends before (``DocumentState.until``)."""

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
        total = sum(self.served)  # stratified by documents: a part ahead is never chosen
        if (self.config.sampling, self.config.by) == ("stratified", "documents") and any(
            s > w * total + 1 + 1e-9 * (1 + total)
            for s, w in zip(self.served, self.weights, strict=True)
        ):  # (a reshard's turns too: old rank 0's)
            raise Disagree("served", f"{list(self.served)}: a part more than one document ahead "
                           f"of its weight's share ({list(self.weights)})")  # fmt: skip
        states = [self.parts[name].counters for name in names]
        if self.resharded:
            return  # (a reshard's turns start from old rank 0's, each part's counts from 0)
        documents = sum(c.documents for c in states)
        if self.handed != documents:
            raise Disagree("handed", f"is {self.handed}, not the {documents} documents its "
                           "parts handed out")  # fmt: skip
        each = [c.tokens if self.config.by == "tokens" else c.documents for c in states]
        if any(map(operator.gt, self.served, each)):
            raise Disagree("served", f"{list(self.served)} counts more than its parts handed "
                           f"out ({each})")  # fmt: skip

    @property
    def resharded(self) -> bool:
        """Resharded: windows dealt to it (``replays``), or a part in or past a resharded
        epoch's rest."""
        return bool(self.replays) or any(p.resharded for p in self.parts.values())


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
    window_slots: tuple[Count, ...] | msgspec.UnsetType = msgspec.UNSET
    """Best fit of a mixture, rows of the window handed out, documents of a part skipped among
    its own in it (absent: none): the document slots of each part's share the window passed,
    its skipped ones held (``source.slots_at``), which a reshard deals of the part's share (a
    part's state, ``mixreshard.reshard`` builds it: its own)."""
    window_next: tuple[Across, ...] | msgspec.UnsetType = msgspec.UNSET
    """Best fit of a mixture, rows of the window handed out, crossing a part's epoch end (absent:
    none does): each part's epoch ends it crosses and its slots of the part's share of the last
    epoch it reaches, after all those of its share before (``FitWindow.across``)."""
    window_repeats: Positive | msgspec.UnsetType = msgspec.UNSET
    """Best fit of a corpus, rows of the window out: its documents handed out again (dealt)."""
    cut_slots: Count | msgspec.UnsetType = msgspec.UNSET
    """Concat, the next batch starting inside a document (a mixture's: of its part ``next``):
    the document slots between the position and that document, of documents skipped for their
    content (in the share of its epoch, from its start, with ``cut_next``), so that a reshard
    cuts the document itself, not the first slot after the position (absent: none)."""
    cut_next: Positive | msgspec.UnsetType = msgspec.UNSET
    """Concat: the epochs past the documents' that that document is in (1: the next; absent:
    the documents' own)."""

    def check(self) -> None:
        docs = self.documents
        short, again = self.window_documents, self.window_repeats
        if isinstance(short, int) and not (self.row and self.window and short < self.window):
            raise Disagree("window_documents", "is a best-fit window's, cut short, rows out")
        if isinstance(again, int) and (not self.row or isinstance(docs, MixtureState)
                                       or again > (self.window or 0)):  # fmt: skip
            raise Disagree("window_repeats", "counts a corpus's best-fit window's, rows out")
        names = docs.config.parts if isinstance(docs, MixtureState) else ()
        counted, out = self.window_parts or (), bool(self.row and self.window)
        if (names and out and not counted) or (counted and not out):
            raise Disagree("window_parts", "counts a mixture's best-fit window, rows out, only")
        held, most = sum(counted), self.window or 0  # (a mixture's window out holds some)
        if counted and (len(counted) != (len(names) or 1) or not bool(names) <= held <= most):
            raise Disagree("window_parts", f"must count each part's documents (a part's state: "
                           f"its own) of a window of at most {self.window}")  # fmt: skip
        slots = self.window_slots or ()
        if slots and (len(slots) != len(counted) or slots == counted
                      or any(s < d for s, d in zip(slots, counted, strict=True))):  # fmt: skip
            raise Disagree("window_slots", "counts the slots of each part's documents (a part's "
                           "state: its own) in a mixture's best-fit window, rows out, where some "
                           "were skipped (at least its window_parts)")  # fmt: skip
        crossing = self.window_next or ()
        if crossing and (len(crossing) != len(counted) or not any(a.ends for a in crossing)):
            raise Disagree("window_next", "counts each part's slots of its next epoch in a "
                           "mixture's best-fit window, rows out, that crosses one's epoch end")
        unknown = set(self.packed_parts or ()).difference(names)
        if unknown:
            raise Disagree("packed_parts", f"name {sorted(unknown)}, not the mixture's parts")
        if (self.cut_slots or self.cut_next) and (not self.batches or self.window):
            raise Disagree("cut_slots", "and cut_next say where the document a concat batch "
                           "starts in lies, with batches out")  # fmt: skip
        if self.offset and not self.batches:
            raise Disagree("offset", f"is {self.offset}: ids of a document in batches out, with "
                           "none out")  # fmt: skip
        if self.packing == "bestfit" and self.window is None:
            raise Disagree("window", "is needed by best fit")
        if self.packing == "concat" and self.window is not None:
            raise Disagree("packing", "is concat, but the state has a best-fit window")
        fits = {"window_number": self.window_number, "row": self.row,
                "window_epoch": self.window_epoch is not None}  # fmt: skip
        for name, said in ({"offset": self.offset} if self.window else fits).items():
            if said:  # (what the other packing's state says: nothing past here reads it)
                raise Disagree(name, f"is {'concat' if self.window else 'best fit'}'s only, not "
                               f"{self.packing}'s")  # fmt: skip
        packings = () if self.scheduled is None else self.scheduled.packings
        if packings and (self.packing != "bestfit" or packings[-1].rows != self.row):
            raise Disagree("schedule", "packings: the last's rows must be the best-fit row")
        lengths = {t for _, t, _ in self.steps} if packings else set()  # (once: steps * packings)
        if any(p.seq_len not in lengths for p in packings):
            raise Disagree("schedule", "packings: each one's seq_len must be one of the schedule's")
        states = docs.parts if isinstance(docs, MixtureState) else {"": docs}
        for part, state in states.items():  # (a rest is packed as the batches are)
            if state.reshard is not None and state.reshard.window != self.window:
                where = f"documents.{f'parts.{part}.' if part else ''}reshard.window"
                raise Disagree(where, f"is {state.reshard.window}, not the batches' window "
                               f"{self.window}")  # fmt: skip
        replays = docs.replays if isinstance(docs, MixtureState) else msgspec.UNSET
        if any(r.documents > (self.window or 0) for r in replays or ()):
            raise Disagree("documents.replays", f"hold more than a window of {self.window}")
        at = None if self.scheduled is None else self.scheduled.at
        if at is not None and at != self.batches and not self.resharded:  # (a reshard's: old's)
            raise Disagree("schedule", f"at={at} is not batches={self.batches}: a state never "
                           "resharded is at its own batch of the schedule")  # fmt: skip
        if any(a.seq_len == b.seq_len for a, b in itertools.pairwise(packings)):
            raise Disagree("schedule", "packings: one per seq_len in turn (two in a row say one)")

    @property
    def steps(self) -> list[tuple[int, int, int]]:
        """The schedule as ``(batch, seq_len, batch_size)`` steps, the first the state's sizes
        at batch 0 (fixed sizes: that one only)."""
        changes = () if self.scheduled is None else self.scheduled.changes
        return [(0, self.seq_len, self.batch_size), *((s.batch, s.seq_len, s.batch_size)
                                                      for s in changes)]  # fmt: skip

    @property
    def resharded(self) -> bool:
        """Resharded: a mixture's windows dealt to it (even none), or a part in or past a
        resharded epoch's rest (its counts start from the reshard)."""
        docs = self.documents
        parts = docs.parts.values() if isinstance(docs, MixtureState) else [docs]
        return isinstance(getattr(docs, "replays", None), tuple) or any(p.resharded for p in parts)

    def shape_at(self, batch: int) -> tuple[int, int]:
        """``(seq_len, batch_size)`` of batch ``batch`` (from 0) of the state's schedule."""
        due = [(t, n) for b, t, n in self.steps if b <= batch]
        return due[-1] if due else (self.seq_len, self.batch_size)

    def out_before(self, batches: int) -> tuple[int, int]:
        """The rows of the first ``batches`` batches, and the ids they predict (each row's
        ``seq_len``), step by step of the schedule."""
        starts = self.steps
        ends = [b for b, _, _ in starts[1:]] + [batches]
        each = [(max(0, min(end, batches) - b) * n, t) for (b, t, n), end in zip(starts, ends,
                                                                                   strict=True)]
        return sum(rows for rows, _ in each), sum(rows * t for rows, t in each)

    def check_run(self) -> None:
        """Check the state against the run it was taken in, where the state of batches enters
        (``batches_start``, ``reshard``; never a state a reshard made, whose counts start from
        it and whose window and rows are the old ranks'; nor a mixture's part's view of its
        batches, which ``reshard`` builds).

        What the batches out hold: concat's ids end to end are the documents' before the
        next one and its ``offset``; the run's first best-fit window gave every row out; rows
        out of a window were in the last batch (its step's ``seq_len``, the last packing's).

        The best-fit window number against the documents before it. A window holds 1 to
        ``window`` documents (fewer at an epoch's or a run's end). A corpus numbers its windows
        within each epoch, each whole but its epoch's last: its documents fill exactly the
        windows before the number; the state of a window not begun (no row out) may be at the
        next epoch's start, or a window begun at the epoch's end. A mixture numbers them from its
        start, in its epoch 0 (``MixMark.epoch``), over the documents it handed out (a window
        may end early: at a change of weights).

        Raises:
            StateError: naming the field (``offset``, ``row``, ``schedule``, ``window_number``
                or ``window_epoch``).
        """
        docs, size, n, row = self.documents, self.window, self.window_number, self.row
        parts = docs.parts.values() if isinstance(docs, MixtureState) else [docs]
        resharded = self.resharded
        packings = () if self.scheduled is None else self.scheduled.packings
        rows, ids = self.out_before(self.batches)
        held = sum(p.counters.tokens for p in parts) + self.offset
        first = not (n or self.window_epoch) and (  # the run's first window
            isinstance(docs, MixtureState) or docs.position.epoch == 0)  # fmt: skip
        window_rows = sum(p.rows for p in packings) if packings else row
        last = self.shape_at(self.batches - 1)[0]  # (rows out of the window: some in it)
        for field, wrong, says in [
            ("offset", size is None and held != ids, f"is {self.offset}: with the ids of the "
             f"documents before it, {held}, not the {ids} ids the batches out hold (concat: ids "
             "end to end)"),
            ("row", bool(row) and not self.batches, f"is {row}: rows out of a window, with no "
             "batch out"),
            ("row", bool(size) and first and window_rows != rows, f"is {row}: the rows out of "
             f"the first window are the {rows} rows of the batches out, not {window_rows}"),
            ("schedule", bool(packings) and bool(row) and packings[-1].seq_len != last,
             f"packings: the last's seq_len is not {last}, the last batch's"),
        ]:  # fmt: skip
            if wrong and not resharded:
                raise StateError(f"bad batches state: {field}: {says}", field=field)
        if size is None:
            return
        if isinstance(docs, MixtureState):
            if self.window_epoch:
                raise StateError(f"bad batches state: window_epoch: {self.window_epoch}, not a "
                                 "mixture's: it numbers its windows in epoch 0",
                                 field="window_epoch")  # fmt: skip
            if resharded:
                return
            handed, step, of, whose = docs.handed, 0, "", "the mixture"
        else:
            handed, epoch = docs.counters.epoch_documents, docs.position.epoch
            step = (epoch if self.window_epoch is None else self.window_epoch) - epoch
            if resharded and step > 1:  # (a window's epoch is the documents', or the next; an
                # earlier one's where no window was packed since: a rank of empty shares)
                raise StateError(f"bad batches state: window_epoch: {self.window_epoch}, past "
                                 f"the documents' epoch {epoch} and the next",
                                 field="window_epoch")  # fmt: skip
            rest = docs.reshard  # (a rest's own windows are numbered from its next_window on,
            own = None if rest is None or step or rest.epoch != epoch else rest.next_window
            if own is not None and n > own + handed + 1 and not docs.counters.skips:  # (an old
                # rank's dealt: below; skipped documents' slots fill windows too)
                raise StateError(f"bad batches state: window_number: {n}, past the rest's "
                                 f"first window {own} and the {handed} documents it handed "
                                 "out", field="window_number")  # fmt: skip
            if resharded:
                return
            of, whose = f" (of epoch {epoch + step})", "its epoch"
        # A corpus's windows are whole but the last of its epoch (its number: the next's), in
        # document slots: a document skipped for its content holds one (``packing._read``).
        least = n if isinstance(docs, MixtureState) else (n - 1) * size + 1 if n else 0
        skips = 0 if isinstance(docs, MixtureState) else docs.counters.skipped_documents
        least = max(min(least, 1), least - skips)  # (skipped documents of the epoch: at most)
        if not ((step == 0 and least <= handed <= n * size) or (step == 1 and not n)
                or (step < 0 and not handed and not row)):  # fmt: skip (empty shares since)
            raise StateError(f"bad batches state: window_number: {n}{of} does not agree with "
                             f"the {handed} documents {whose} handed out before it (windows of "
                             f"{size})", field="window_number")  # fmt: skip

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
