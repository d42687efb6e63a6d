"""Batches: token documents packed into fixed-length training rows, resumable exactly.

The last stage before the model. Documents come from a loader with a
``tokenizer`` (ids made in the workers, each document ending with the
end-of-text id) and are concatenated in stream order; each batch is
``batch_size`` rows of ``seq_len + 1`` ids. Row ``r`` of a batch starting at
token ``p`` is ``tokens[p + r*seq_len : p + (r+1)*seq_len + 1]``, so rows (and
batches) overlap by one id and every id after the first is a target exactly
once: ``x, y = batch[:, :-1], batch[:, 1:]``. Under a schedule (``shapes``) each
batch has its own shape and starts where the last one ended: the ids are the same,
cut differently, and none is left out at a change.

A state is the document stream's state before the document in which the next
batch starts, plus the offset of that start inside the document's ids: resuming
re-reads that one document and cuts it at the same id. Ids left over when the
stream ends (fewer than a batch) are dropped.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError
from openwebtext.options import MOST_INT, countable
from openwebtext.stream.carried import cut_slot
from openwebtext.stream.counters import PackingCounts
from openwebtext.stream.mixschema import MixRun
from openwebtext.stream.packed import PackedBatch, segmented
from openwebtext.stream.packing import PACKING, WINDOW
from openwebtext.stream.partpacking import add_parts, packed_stats, parts_of_state, parts_to_state
from openwebtext.stream.readahead import Primed
from openwebtext.stream.schema import BatchesState, MixtureState
from openwebtext.stream.shapes import Cursor, Schedule, check_schedule, schedule_of
from openwebtext.stream.source import DocumentSource, Packer, Run, copied, guarded
from openwebtext.stream.state import Stats
from openwebtext.tokenizer import Tokenizer

__all__ = [
    "BatchIterator", "Batches", "batch_ids", "batches_start", "check_packing", "packing_window",
]  # fmt: skip


Item = TypeVar("Item", covariant=True)


class BatchIterator(Protocol[Item]):
    """What ``Loader.batches`` returns, whatever the packing: an iterator of batches (arrays,
    or ``PackedBatch`` records with ``segments=True``) with a state, to use in ``with``."""

    def __iter__(self) -> BatchIterator[Item]: ...

    def __next__(self) -> Item: ...

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        ...

    def start(self) -> BatchIterator[Item]:
        """Start the workers and make ready what the first batch needs, in the background
        (while a model loads); ``next()`` then hands it out. Returns the iterator."""
        ...

    @property
    def stats(self) -> Stats:
        """The document stream's counts."""
        ...

    def close(self) -> None:
        """Stop the workers now: the batches end here (``next`` raises ``StopIteration``).
        Safe to call twice."""
        ...

    def __enter__(self) -> BatchIterator[Item]: ...

    def __exit__(self, *exc: object) -> None: ...


class Batches(Packer):
    """The running iterator of packed batches (``Loader.batches``); owns its documents.

    Args:
        documents: The running token documents to pack, started from the ``documents`` of
            ``start``.
        vocabulary: The tokenizer that made their ids.
        seq_len: Ids a row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        schedule: Shapes that change, instead of ``seq_len`` and ``batch_size``.
        dtype: The dtype of the yielded arrays (int64 suits embeddings).
        segments: Yield ``PackedBatch`` records instead of plain arrays.
        start: The saved state to go on from (``batches_start``; None: a fresh start).

    Raises:
        ValueError: a size is not positive, or ``dtype`` cannot hold every id
            (``documents`` are then closed).
    """

    def __init__(
        self,
        documents: DocumentSource,
        vocabulary: Tokenizer,
        seq_len: int | None = None,
        batch_size: int | None = None,
        *,
        schedule: Schedule | None = None,
        dtype: DTypeLike = np.int64,
        segments: bool = False,
        start: BatchesState | None = None,
    ) -> None:
        super().__init__(documents)
        self.segments = segments
        try:
            self._shape = Cursor(schedule_of(seq_len, batch_size, schedule), start)
            self.dtype = batch_ids(dtype, vocabulary, segments)
        except BaseException:
            documents.close()
            raise
        # Runs of documents not yet fully handed out in batches: each run's ids end to end,
        # where each document ends in them, where they begin among the ids read by this
        # iterator, and the number of its first document.
        self._pending: deque[_Run] = deque()
        offset = 0 if start is None else start.offset
        self._head = offset  # where the next batch starts among the ids read
        # Where the state says the document it starts inside lies (checked when it is read: only
        # a reshard reads it; a resharded state's are its old rank's, unchecked), said again by
        # a state taken before it is read.
        self._cut_where: dict[str, Any] = {} if start is None else {
            k: v for k, v in (("cut_slots", start.cut_slots), ("cut_next", start.cut_next))
            if isinstance(v, int)}  # fmt: skip
        self._cut_said = None if start is None or start.resharded else self._cut_where
        self._read = self._numbered = 0  # ids and documents read
        self._batches = 0 if start is None else start.batches
        # Documents cut by the rows' starts, counted up to ``_counted`` (among the ids read) as
        # the runs are let go and at each change of length: from there to the next batch's
        # start, a row every ``_row_len`` ids; the row before ``_counted`` began
        # ``_before_len`` ids before it (the length of the batch before the next).
        self._packed = PackingCounts() if start is None else start.packed
        self._parts = parts_of_state(start)  # a mixture's, per part
        said = None if start is None else start.documents
        self._cut_part = said.next if isinstance(said, MixtureState) else None  # (offset's)
        self._counted = offset
        self._row_len = self._shape.seq_len
        at = self._shape.at
        self._before_len = self._shape.schedule.shape(at - 1)[0] if at else self._row_len

    @property
    def seq_len(self) -> int:
        """Ids a row of the next batch predicts."""
        return self._shape.seq_len

    @property
    def batch_size(self) -> int:
        """Rows of the next batch."""
        return self._shape.batch_size

    def __iter__(self) -> Batches:
        return self

    def start(self) -> Batches:
        """Start the workers and read the first batch's documents now, on a thread, while
        the caller does something else (loads its model). The batches and states are those
        without it."""
        if not self._pending and not isinstance(self._docs, Primed):
            need = self.seq_len * self.batch_size + 1 + self._head
            self._docs = Primed(self._docs, True, until_documents=1 << 62, until_ids=need)
        return self

    _KEPT = ("_pending", "_shape", "_head", "_read", "_numbered", "_batches", "_packed",
             "_parts", "_counted", "_before_len", "_row_len", "_at")  # fmt: skip

    def _copies(self) -> dict[str, Any]:
        at = None if self._pending else self._docs.mark()
        return {"_pending": deque(self._pending), "_shape": copied(self._shape), "_at": at}

    def _batch(self) -> Any:
        """The next batch: an array (B, L + 1), or a ``PackedBatch`` with ``segments``."""
        seq_len = self._shape.seq_len
        need = seq_len * self._shape.batch_size + 1
        if seq_len != self._row_len:  # a change of length: the rows before it counted at theirs
            self._count_cuts()
            self._row_len = seq_len
        while self._read - self._head < need:
            try:
                run = self._docs.next_run(in_order=True)
            except StopIteration:
                self._shut()
                raise
            ids, ends = run.end_to_end()
            if not self._read and self._head and (not len(ends) or self._head >= ends[0]):
                self._shut()  # a resumed state's offset: inside the document it begins in
                raise StateError(
                    f"bad batches state: offset: {self._head} lies past the end of the "
                    f"document the next batch begins in ({int(ends[0]) if len(ends) else 0} "
                    "ids)", field="offset",
                )  # fmt: skip
            if not self._read and self._head and isinstance(run, MixRun):  # (what reshard deals)
                self._check_cut_part(int(run.parts[0]))
            if not self._read and self._head and self._cut_said is not None:
                self._check_cut_slots(run)
            begins = run.begins if isinstance(run, MixRun) else run.start
            marked = _marked(ends, begins, getattr(run, "parts", None)) if self.segments else ()
            self._pending.append(_Run(run, ids, ends, self._read, self._numbered, marked))
            self._read += len(ids)
            self._numbered += len(run)
        spans = self._spans(need)
        first, lo, hi, _ = spans[0]
        flat = first.ids[lo:hi]
        if len(spans) > 1:
            flat = np.concatenate([span.ids[lo:hi] for span, lo, hi, _ in spans])
        tokens = overlapping_rows(flat, seq_len, self.dtype)
        batch = self._segmented(tokens, spans, seq_len) if self.segments else tokens
        # Drop the runs whose ids all lie before the next batch's start.
        self._head += need - 1
        while self._pending and self._pending[0].first + len(self._pending[0].ids) <= self._head:
            self._count_cuts()  # its rows' starts, before it goes
            self._pending.popleft()
        self._batches += 1
        self._shape.advance()
        return batch

    def _spans(self, need: int) -> list[tuple[_Run, int, int, int]]:
        """The next ``need`` ids: ``(run, from, to, its first document's number)`` in its
        ids, one after another."""
        spans = []
        at, left = self._head, need
        for run in self._pending:
            first, number = run.first, run.number
            lo = at - first
            hi = min(len(run.ids), lo + left)
            if hi > lo:
                spans.append((run, lo, hi, number))
                left, at = left - (hi - lo), hi + first
            if not left:
                break
        return spans

    def _segmented(
        self, tokens: np.ndarray[Any, Any], spans: list[tuple[_Run, int, int, int]], seq_len: int
    ) -> PackedBatch:
        """The batch of ``tokens`` with its documents and positions (``segments=True``): slices
        of its runs' (``_Run.marked``)."""
        sources = None
        if len(spans) == 1:
            run, lo, hi, _ = spans[0]
            documents, positions = run.marked[0][lo:hi], run.marked[1][lo:hi]
            if len(run.marked) > 2:  # a mixture's: each id's part
                sources = run.marked[2][lo:hi]
        else:  # documents numbered on from one run to the next
            first = spans[0][3]
            documents = np.concatenate([r.marked[0][a:b] + (n - first) for r, a, b, n in spans])
            positions = np.concatenate([r.marked[1][a:b] for r, a, b, _ in spans])
            if len(spans[0][0].marked) > 2:
                sources = np.concatenate([r.marked[2][a:b] for r, a, b, _ in spans])
        return segmented(
            tokens,
            overlapping_rows(documents, seq_len),
            overlapping_rows(positions, seq_len),
            None if sources is None else overlapping_rows(sources, seq_len),
        )

    def _check_cut_slots(self, run: Run) -> None:
        """A state inside a document says where it lies (``cut_slots``, ``cut_next``: what a
        reshard cuts): where the document read again lies."""
        found = cut_slot(run, 0)
        if found != self._cut_said:
            self._shut()
            raise StateError(f"bad batches state: cut_slots: the state says {self._cut_said}, "
                             f"but the document the next batch begins in lies at {found}",
                             field="cut_slots")  # fmt: skip

    def _check_cut_part(self, part: int) -> None:
        """A mixture's state inside a document (``offset``) names its part (``documents.next``,
        which a reshard deals the document by): the part of the document read again."""
        if part != self._cut_part:
            self._shut()
            raise StateError(f"bad batches state: documents.next: {self._cut_part}, but the "
                             f"document the next batch begins in is part {part}'s",
                             field="documents.next")  # fmt: skip

    def _count_cuts(self) -> None:
        """Count the documents cut by the rows handed out, up to the next batch's start."""
        if self._head > self._counted:
            self._packed, self._parts = self._packed_now()
            self._counted, self._before_len = self._head, self._row_len

    def _packed_now(self) -> tuple[PackingCounts, np.ndarray[Any, Any]]:
        """What packing did to the documents of the batches handed out, and per part (a
        mixture's: each cut counted to its document's part): a row that starts inside a
        document cuts it (its first cut if the row before started at or before its start: a
        cut document and two pieces; else one piece more). Changes nothing (``stats`` may be
        read from another thread, as ``ahead``'s is)."""
        lo, hi, cuts, firsts = self._counted, self._head, 0, 0
        parts = self._parts
        step = self._row_len
        for run in list(self._pending):
            a, b = max(lo, run.first), min(hi, run.first + len(run.ids))
            if a >= b:
                continue
            starts = np.arange(a + (lo - a) % step, b, step) - run.first
            j = np.searchsorted(run.ends, starts, "right")
            begins = np.where(j > 0, run.ends[j - 1], 0)
            cut = begins < starts
            before = starts - step  # where the row before each began
            if len(starts) and starts[0] + run.first == lo:
                before[0] = starts[0] - self._before_len
            first = cut & (begins >= before)
            cuts += int(np.count_nonzero(cut))
            firsts += int(np.count_nonzero(first))
            of = getattr(run.run, "parts", None)  # a mixture's: each document's part
            if of is not None and cut.any():
                cut_of = of[j[cut]]
                each = np.bincount(cut_of, weights=first[cut])
                counted = np.stack([each, np.bincount(cut_of, minlength=len(each)) + each])
                parts = add_parts(parts, counted.astype(np.int64))
        return self._packed.add(0, firsts, cuts + firsts), parts

    @guarded
    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        mark, offset = None, self._head - self._read  # nothing pending: a resumed offset
        where = self._cut_where if offset or not self._read else {}  # (the start's, unread)
        if self._pending:  # the document the next batch starts in
            run = self._pending[0]
            j = int(np.searchsorted(run.ends, self._head - run.first, "right"))
            mark, offset = run.run.mark_before(j), self._head - run.first - run.begin(j)
            where = cut_slot(run.run, j) if self._batches else {}
        documents = self._docs.state(self._at if mark is None else mark)
        packed, parts = self._packed_now()
        state = BatchesState(
            *self._shape.first(), documents, offset, self._batches, **where,
            schedule=self._shape.section(), packed=packed,
            packed_parts=parts_to_state(documents, parts),
        )  # fmt: skip
        return state.to_json()

    @property
    @guarded
    def stats(self) -> Stats:
        """The document stream's counts (documents read ahead into the pending batch included),
        and what packing did to the documents of the batches handed out (a mixture's: per part
        too, ``packing.packed_stats``)."""
        return packed_stats(self._docs.stats, *self._packed_now())


class _Run(NamedTuple):
    """A run of documents read by ``Batches``, their ids end to end."""

    run: Run
    ids: np.ndarray[Any, Any]
    ends: np.ndarray[Any, Any]
    """Where each document ends in ``ids``."""
    first: int
    """Where ``ids`` begin among the ids read."""
    number: int
    """Of the first document, among the documents read."""
    marked: tuple[np.ndarray[Any, Any], ...]
    """With segments: each id's document (from 0 in the run) and position in it (int32)."""

    def begin(self, j: int) -> int:
        """Where document ``j`` begins in ``ids``."""
        return 0 if j == 0 else int(self.ends[j - 1])


_POSITIONS = np.iinfo(np.int32).max


def _marked(
    ends: np.ndarray[Any, Any],
    start: int | np.ndarray[Any, Any],
    parts: np.ndarray[Any, Any] | None = None,
) -> tuple[np.ndarray[Any, Any], ...]:
    """Each id's document and its position in it, of documents ending at ``ends`` (the
    first's ids begin at ``start`` in it; or each document's at its ``start``, an array); a
    mixture's (``parts``, each document's): each id's part too."""
    lengths = np.diff(ends, prepend=0)
    most = start if isinstance(start, int) else int(start.max()) if len(start) else 0
    if len(ends) and int(ends[-1]) + most > _POSITIONS:  # (a bound of every position)
        raise ValueError("segments: a document of more than 2**31-1 ids: its positions do not "
                         "fit the int32 they are given as")  # fmt: skip
    if parts is not None:
        documents, positions = _marked(ends, start)
        return documents, positions, np.repeat(parts.astype(np.int16), lengths)
    documents = np.repeat(np.arange(len(ends), dtype=np.int32), lengths)
    positions = np.arange(len(documents), dtype=np.int32)
    positions -= np.repeat((ends - lengths).astype(np.int32), lengths)
    if isinstance(start, np.ndarray):
        positions += np.repeat(start.astype(np.int32), lengths)
    elif len(ends):
        positions[: ends[0]] += start
    return documents, positions


def overlapping_rows(
    flat: np.ndarray[Any, Any], seq_len: int, dtype: DTypeLike | None = None
) -> np.ndarray[Any, Any]:
    """Rows of ``seq_len + 1`` ids of ``flat`` (``k * seq_len + 1`` of them), row ``r`` from
    ``flat[r * seq_len]`` on, as a new array (of ``dtype``): what
    ``sliding_window_view(flat, seq_len + 1)[::seq_len].astype(dtype)`` makes, in two copies
    rather than a view built per call."""
    kind = flat.dtype if dtype is None else dtype
    rows = np.empty(((len(flat) - 1) // seq_len, seq_len + 1), kind)
    rows[:, :-1] = flat[:-1].reshape(-1, seq_len)
    rows[:, -1] = flat[seq_len::seq_len]
    return rows


def batch_ids(
    dtype: DTypeLike, vocabulary: Tokenizer, segments: bool = False, pad_id: int | None = None,
    packing: str = "bestfit",
) -> np.dtype[Any]:  # fmt: skip
    """``dtype`` as numpy's, checked with the other arguments of what a batch holds: an
    integer dtype that holds every id of ``vocabulary``, ``segments`` a bool, and ``pad_id``
    (best fit's padding; None: end-of-text) an int that dtype holds, given to best fit only
    (concat never pads: it was taken and did nothing).

    Raises:
        ValueError: one of them is not, named with what it may be.
    """
    largest = vocabulary.n_vocab - 1
    try:
        kind = None if dtype is None else np.dtype(dtype)  # (numpy's None is float64)
    except TypeError:
        kind = None
    if kind is None or kind.kind not in "iu" or np.iinfo(kind).max < largest:
        said = dtype if kind is None else kind.name
        raise ValueError(f"dtype must be an integer dtype that holds every id (up to {largest}), "
                         f"not {said!r}")  # fmt: skip
    if not isinstance(segments, bool):
        raise ValueError(f"segments must be True or False, not {segments!r}")
    if pad_id is not None and packing != "bestfit":
        raise ValueError(f"pad_id pads best fit's rows; {packing} never pads: leave it out")
    low, high = np.iinfo(kind).min, np.iinfo(kind).max
    ok = isinstance(pad_id, int | np.integer) and not isinstance(pad_id, bool | np.bool_)
    if pad_id is not None and not (ok and low <= pad_id <= high):
        raise ValueError(f"pad_id must be an int in {low}..{high} (what dtype {kind} holds), "
                         f"not {pad_id!r}")  # fmt: skip
    return kind


def packing_window(packing: str, window: int | None) -> int | None:
    """The best-fit window of ``packing`` given ``window`` (None: ``WINDOW`` under best fit;
    concat has none, and refuses one: it would be ignored).

    Raises:
        ValueError: an unknown packing, a window that is not a positive int, or a window
            given to concat.
    """
    if packing not in PACKING:
        raise ValueError(f"packing must be one of {PACKING}, not {packing!r}")
    if packing != "bestfit":
        if window is not None:
            raise ValueError(f"window is best fit's documents packed at a time; {packing} packs "
                             "documents end to end: leave it out, or pass packing='bestfit'")
        return None
    window = WINDOW if window is None else window
    if not countable(window, 1):
        raise ValueError(f"window must be an int >= 1 and at most {MOST_INT}, not {window!r}")
    return window


def batches_start(
    state: Any, schedule: Schedule, packing: str = "concat", window: int | None = None
) -> BatchesState | None:
    """A saved ``state_dict()`` of batches, parsed and checked against the batches about to
    start from it (None: a fresh start); ``window`` as ``packing_window`` takes it.

    Raises:
        ValueError: an unknown packing, or a window that is not a positive int (or is given
            to concat).
        StateError: ``state`` is not a batches state, or was saved for another schedule (or
            other sizes), another packing or window.
    """
    window = packing_window(packing, window)
    if state is None:
        return None
    parsed = BatchesState.from_json(state)
    check_schedule(parsed, schedule)
    parsed.check_run()
    check_packing(parsed, packing, window)
    return parsed


def check_packing(state: BatchesState, packing: str, window: int | None) -> None:
    """Raise a ``StateError`` (field ``packing`` or ``window``) if ``state`` was saved for
    another packing, or best fit over another window."""
    if state.packing != packing or (packing == "bestfit" and state.window != window):

        def said(packing: str, window: int | None) -> str:
            return f"packing={packing!r}" + (f", window={window}" if packing == "bestfit" else "")

        raise StateError(
            f"the state was saved for {said(state.packing, state.window)}; now "
            f"{said(packing, window)}", "packing" if state.packing != packing else "window",
            mismatch=True,
        )  # fmt: skip
