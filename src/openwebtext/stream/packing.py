"""Document-aware packing: rows of whole documents placed by best fit (``BestFitBatches``),
handed out as arrays or as ``packed.PackedBatch`` records.

Best fit (after "Fewer Truncations Improve Language Modeling", Ding et al., 2024): the stream
is read in windows of ``window`` documents; a document longer than a row is split into
row-sized pieces; the pieces and the shorter documents are placed, longest first, each into
the open row with the least room that still holds it (a new row if none does), so that no
document shorter than a row is ever cut; rows are padded with ``pad_id`` (segment 0) and
handed out in an order seeded by the window's epoch and number in it. A state is the document
stream's state at the start of a window and the rows of that window already handed out:
resuming reads the window again and packs it the same way (the window is rebuilt, never
stored). A resharded epoch's share first packs the windows old ranks had begun (their
documents, numbers and rows handed out come from the stream: ``windows_ahead``), skipping
those rows, then its own windows. Under a schedule (``shapes``) a window is packed at the
``seq_len`` of the batch being made; at a change of ``seq_len`` the rows not handed out of
the windows packed are packed again at the new length: a window not begun afresh from its
documents, the window begun from the pieces of its rows left (``Rows.pieces``: documents
whole, or pieces of one longer than the old row, each cut again if longer than the new row),
its rows in an order seeded by the window and the number of times it was packed again. Its
state then lists those packings (``Scheduled.packings``) and resuming packs it the same way.

The work is a few array operations per window and per 256 rows, none per document: the stream
hands documents out in runs (``source.TokenRun``), the bins are chosen on the pieces' lengths
alone (``best_fit_rows``, the one loop left in Python, per piece, but for a run of pieces of one
length, placed at once), and the rows are made by one join of their pieces' slices (and of
slices of a ramp for the positions). A packing again is that array work over the pieces of the
rows left (many: a window of long documents packed at a short row is cut into pieces that stay
cut), once per change of ``seq_len``, and once per packing a resumed state lists.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError
from openwebtext.plan import permutation
from openwebtext.stream.counters import PackingCounts
from openwebtext.stream.fitting import Rows, best_fit, fit, fit_documents, padding_row
from openwebtext.stream.packed import PackedBatch
from openwebtext.stream.partpacking import (
    add_parts,
    check_window,
    document_parts,
    id_parts,
    packed_stats,
    parts_of_state,
    parts_to_state,
    window_fields,
    window_repeats,
)
from openwebtext.stream.readahead import Primed
from openwebtext.stream.schema import BatchesState, MixtureState
from openwebtext.stream.sections import Packed
from openwebtext.stream.shapes import Cursor, Schedule, schedule_of
from openwebtext.stream.source import (
    DocumentSource,
    Packer,
    Run,
    TokenRun,
    WindowAhead,
    copied,
    guarded,
    slots_at,
)
from openwebtext.stream.state import Mark, Stats
from openwebtext.stream.windows import Reading, Window

__all__ = [
    "PACKING",
    "WINDOW",
    "BestFitBatches",
    "best_fit",
]

#: The packings ``Loader.batches`` knows: documents end to end, or whole by best fit.
PACKING = ("concat", "bestfit")

#: Documents best fit packs at a time (``Loader.batches(window=…)``).
WINDOW = 4096

#: The stream of randomness of the row order (``plan`` uses 0 and 1).
ROWS = 2

#: Rows best fit makes at a time (batches are views of them).
MADE_ROWS = 256


def _mark_at(run: Run, j: int) -> Mark:
    """The stream's mark just before document ``j`` of a corpus's ``run``, in its block (not
    before the skipped slots that lie between it and the document before, as ``mark_before(0)``
    may be): where a window whose first slots held no document starts, so that its state's
    position is its first document's slot (``slots_at``), from which a reshard deals
    the window (``rest.Rest``) and a resumed run reads it again."""
    assert isinstance(run, TokenRun)
    return run.after._replace(in_block=run.after.in_block - len(run) + j)


class BestFitBatches(Packer):
    """The running iterator of best-fit packed batches (``Loader.batches(packing="bestfit")``).

    Args:
        documents: The running token documents, started from the ``documents`` of ``start``.
        seq_len: Ids a row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        schedule: Shapes that change, instead of ``seq_len`` and ``batch_size``.
        seed: Seeds the order of each window's rows.
        pad_id: The id of padding.
        dtype: The dtype of the yielded arrays.
        segments: Yield ``PackedBatch`` records instead of plain arrays.
        window: Documents packed at a time.
        start: The saved state to go on from (``batches_start``; None: a fresh start).
        take: Documents to read (None: all), to the end of the window the last is in.
    """

    def __init__(
        self,
        documents: DocumentSource,
        seq_len: int | None = None,
        batch_size: int | None = None,
        *,
        schedule: Schedule | None = None,
        seed: int,
        pad_id: int,
        dtype: DTypeLike = np.int64,
        segments: bool = False,
        window: int = WINDOW,
        start: BatchesState | None = None,
        take: int | None = None,
    ) -> None:
        super().__init__(documents)
        self._take, self._read_count, self._start = take, 0, start  # (read into windows)
        # The documents of the first window, when the run it was begun in ended before it.
        short = None if start is None else start.window_documents
        self._short = short if isinstance(short, int) else 0
        try:  # (the documents are closed if the state cannot be resumed)
            self._shape = Cursor(schedule_of(seq_len, batch_size, schedule), start)
            self.dtype = np.dtype(dtype)
            self.seed, self.pad_id, self.segments, self.window = seed, pad_id, segments, window
            # The number the next own window gets, counted within its epoch; the rows of the
            # first window already handed out; batches handed out before.
            self._next, self._skip, self._batches = 0, 0, 0
            # A state inside a window packed again at changes of length: its packings.
            self._packings: tuple[Packed, ...] = ()
            epoch = None
            # What packing did in the windows handed out whole, and in the rows handed out of
            # the packings of a window before it was packed again.
            self._packed = PackingCounts()
            self._parts = parts_of_state(start)  # a mixture's, per part (``counted_parts``)
            if start is not None:
                self._next, self._skip = start.window_number, start.row
                epoch, self._packed, self._batches = start.window_epoch, start.packed, start.batches
                if start.scheduled is not None:
                    self._packings = start.scheduled.packings
            self._epoch: int = documents.mark().epoch if epoch is None else epoch
            # A resharded share's windows begun by old ranks: (documents, number, rows handed out).
            self._ahead: deque[WindowAhead] = deque(documents.windows_ahead())
            self._windows: deque[Window] = deque()  # packed, with rows not handed out
            self._rows_left = 0  # in them
            # A run read, from its document j on (and where each of its documents ends).
            self._left: tuple[Run, int, np.ndarray[Any, Any]] | None = None
            self._ended = False
            self._reading: Reading | None = None  # the window being read, not yet packed
            if self._skip:
                self._fill()
                if self._windows:  # (what a reshard deals of it, as its state says)
                    check_window(start, self._windows[0].parts, self._windows[0].mark)
                self._read_ahead()  # (as far as the run the state is of had read)
        except BaseException:
            documents.close()
            raise

    @property
    def seq_len(self) -> int:
        """Ids a row of the next batch predicts."""
        return self._shape.seq_len

    @property
    def batch_size(self) -> int:
        """Rows of the next batch."""
        return self._shape.batch_size

    def __iter__(self) -> BestFitBatches:
        return self

    def start(self) -> BestFitBatches:
        """Start the workers and read the first window's documents now, on a thread, while
        the caller does something else (loads its model); ``next()`` then only packs them.
        The batches and states are those without it."""
        if self._rows_left < self.batch_size and not isinstance(self._docs, Primed):
            size = self._ahead[0][0] if self._ahead else self.window
            self._docs = Primed(self._docs, False, until_documents=size, until_ids=1 << 62)
        return self

    def _fill(self) -> None:
        """Read the rest of the window being read, and pack it."""
        if self._read(None):
            self._pack()

    def _read(self, enough: int | None) -> bool:
        """Read documents into the window being read (begun here if none is): to its end, or
        until it holds ``enough`` ids. A window is the documents of ``window`` document slots
        (a dealt window's own count), or fewer at the end of its epoch, so that an epoch packs
        the same whatever follows it: a document skipped for its content holds its slot, as a
        reshard counts the window an old rank had begun (``rest.Rest``), which cannot know
        where skips lie. True when the window being read is whole (False: nothing left to
        read)."""
        if self._reading is None:
            if not self._more():
                return False
            size = self._short or (self._ahead[0][0] if self._ahead else self.window)
            if self._left is not None:  # documents read already: the window starts at them
                mark = self._left[0].mark_before(self._left[1])
            else:
                mark = self._docs.mark()
            first = slots_at(mark) if isinstance(mark, Mark) else None
            self._reading = Reading(mark, [], 0, 0, None, size, first=first)
        reading = self._reading
        while reading.slots < reading.size and (enough is None or reading.count < enough):
            if self._left is None:
                try:
                    run = self._docs.next_run()
                    self._left = (run, 0, np.cumsum(run.lengths))
                except StopIteration:
                    self._ended = True
                    return True
            run, j, ends = self._left
            if reading.epoch is not None and run.epoch != reading.epoch:  # the next epoch's
                reading.size = reading.documents
                return True
            at = reading.slots  # the slot of document j in the window
            if reading.first is not None and isinstance(run, TokenRun):
                if reading.epoch is None and run.epoch != reading.mark.epoch:
                    reading.first = 0  # (begun at the end of the epoch before: at its start)
                at = run.first_slot() + j - reading.first
            reading.epoch = run.epoch
            if at >= reading.size and reading.documents:  # skipped slots filled it: document
                reading.slots = reading.size  # j is the next window's
                break
            if at and not reading.documents and reading.first is not None:  # (a window starts
                reading.first, at = reading.first + at, 0  # at its first document, the slots
                reading.mark = _mark_at(run, j)  # skipped before it in none: its state there)
            end = min(len(run), j + reading.size - at)
            begin = int(ends[j - 1]) if j else 0
            if enough is not None:  # as many as hold enough ids, an id read for one handed out
                end = min(end, int(np.searchsorted(ends, begin + enough - reading.count)) + 1)
            reading.parts.append((run, j, end))
            reading.documents += end - j
            reading.slots = at + end - j
            if end == len(run) and reading.first is not None and isinstance(run, TokenRun):
                reading.slots = slots_at(run.after) - reading.first  # (and the skips after it)
            self._read_count += end - j
            reading.count += int(ends[end - 1]) - begin
            self._left = (run, end, ends) if end < len(run) else None
        return reading.slots >= reading.size

    def _more(self) -> bool:
        """Whether a window may be read: documents left, ``take`` not reached (or the state's)."""
        taken = self._take is not None and self._read_count >= self._take and not self._skip
        return not taken and (not self._ended or self._left is not None)

    def _pack(self) -> None:
        """Pack the window read into rows, in its seeded order, less the rows handed out."""
        assert self._reading is not None
        reading, self._reading = self._reading, None
        # Cut by the end of the run it was begun in (or resumed from such a state: still).
        cut, self._short = reading.slots < reading.size or self._short, 0
        if not reading.documents:
            return
        assert reading.epoch is not None
        epoch = reading.epoch
        own = (self._next, self._epoch)  # what a state at this window says
        dealt: tuple[Packed, ...] = ()
        if self._ahead:  # a window an old rank had begun: its number and rows handed out
            _, number, skip, dealt = self._ahead.popleft()
        else:  # an own window: numbered within its epoch
            if epoch != self._epoch:
                self._next, self._epoch = 0, epoch
                own = (0, epoch)
            number, skip, self._next = self._next, 0, self._next + 1
        # A state's own packings of the window go on from those of the rank it was dealt by.
        packings = self._packings or dealt
        skip = self._skip if self._packings else max(skip, self._skip)
        if self._skip:  # the window a state is inside: the run that began it counted it (take)
            self._read_count -= reading.documents
        self._skip, self._packings = 0, ()
        cap = (packings[0].seq_len if packings else self.seq_len) + 1
        documents, lengths = fit_documents(reading.parts, cap, self.pad_id, self.dtype)
        labels, parts = id_parts(reading.parts, cap), document_parts(reading.parts)
        try:
            if packings:  # packed at each of its lengths, as it was
                fitted = fit(documents, lengths, cap, self._seeded(epoch, number), packings[0].rows,
                             labels=labels, parts=parts)  # fmt: skip
                for again, packed in enumerate(packings[1:], 1):
                    row = packings[again - 1].rows
                    fitted = self._refit(fitted, row, packed.seq_len, packed.rows, epoch, number,
                                         again)  # fmt: skip
                cap = packings[-1].seq_len + 1
            else:
                fitted = fit(documents, lengths, cap, self._seeded(epoch, number), skip,
                             labels=labels, parts=parts)  # fmt: skip
        except StateError:
            self._shut()
            raise
        if fitted is not None:
            window = Window(reading.mark, *own, fitted, skip)
            window.parts, window.cap, window.packings = reading.parts, cap, packings[:-1]
            window.seeded_by = (epoch, number)
            window.short = reading.slots if cut else 0
            self._windows.append(window)
            self._rows_left += fitted.rows - skip
            self._reshape()  # (a dealt window was packed at its old rank's lengths: now at ours)

    def _refit(
        self,
        fitted: Rows | None,
        row: int,
        seq_len: int,
        skip: int,
        epoch: int,
        number: int,
        again: int,
    ) -> Rows | None:
        """The rows of ``fitted`` from ``row`` on packed again at ``seq_len``, from row
        ``skip`` on; ``again``: the times the window was packed again, this one included."""
        if fitted is None:
            raise StateError("bad batches state: a window packed again has no row left", "row")
        cap = seq_len + 1
        pad = padding_row(cap, self.pad_id, fitted.sources[0], self.dtype)
        return fitted.again(row, cap, skip, self._seeded(epoch, number, again), pad)

    def _reshape(self) -> None:
        """Pack the windows' rows not handed out at the length of the next batch, if it is
        another: a window not begun afresh, the one begun from the pieces of its rows left."""
        cap = self.seq_len + 1
        for window in self._windows:
            if window.cap == cap:
                continue
            self._rows_left -= window.fitted.rows - window.row
            # What packing did in its rows handed out, before they go with this packing.
            self._count(window)
            if window.row == 0 and not window.packings:
                assert window.parts is not None
                documents, lengths = fit_documents(window.parts, cap, self.pad_id, self.dtype)
                labels, parts = id_parts(window.parts, cap), document_parts(window.parts)
                fitted = fit(documents, lengths, cap, self._seeded(*window.seeded_by), 0,
                             labels=labels, parts=parts)  # fmt: skip
            else:
                window.packings = (*window.packings, Packed(window.cap - 1, window.row))
                fitted = self._refit(
                    window.fitted, window.row, self.seq_len, 0, *window.seeded_by,
                    len(window.packings),
                )  # fmt: skip
            assert fitted is not None  # rows not handed out hold pieces
            window.fitted, window.row, window.cap = fitted, 0, cap
            window.made, window.made_from, window.made_to = (), 0, 0
            self._rows_left += fitted.rows

    def _seeded(self, epoch: int, number: int, again: int = 0) -> Callable[[int], Sequence[int]]:
        """The order of the rows of window ``number`` of ``epoch`` (packed again ``again``
        times), given their count."""
        key = (epoch, number, again) if again else (epoch, number)
        return lambda rows: permutation(rows, self.seed, ROWS, *key)

    _KEPT = ("_windows", "_reading", "_left", "_ahead", "_shape", "_rows_left", "_next",
             "_epoch", "_skip", "_packings", "_packed", "_parts", "_batches",
             "_ended", "_read_count", "_short", "_at")  # fmt: skip

    def _copies(self) -> dict[str, Any]:
        reading, at = self._reading, None
        if not (self._windows or reading or self._left):
            at = self._docs.mark()
        return {"_windows": deque(map(copied, self._windows)), "_ahead": deque(self._ahead),
                "_reading": reading and copied(reading, parts=list(reading.parts)),
                "_shape": copied(self._shape), "_at": at}

    def _batch(self) -> Any:
        shape = self._shape
        self._reshape()
        batch_size = shape.batch_size
        while self._rows_left < batch_size and (self._reading is not None or self._more()):
            self._fill()
        if self._rows_left < batch_size:  # fewer rows than a batch left: dropped
            self._shut()
            raise StopIteration
        parts = []  # the batch's rows, from one window or two
        need = batch_size
        while need:
            window = self._windows[0]
            take = min(need, window.fitted.rows - window.row)
            parts.append(self._rows(window, take))
            need -= take
            if window.row == window.fitted.rows:
                self._count(window)
                self._windows.popleft()
        self._batches += 1
        shape.advance()  # the next window is packed at the next batch's length
        self._read_ahead()
        arrays = (
            parts[0] if len(parts) == 1 else [np.concatenate(a) for a in zip(*parts, strict=True)]
        )
        return PackedBatch(*arrays) if self.segments else arrays[0]

    def _read_ahead(self) -> None:
        """Read the next window an id for each id of this one out (by MADE_ROWS rows; under a
        schedule at every batch): as far as a state says (resumed, as far at every batch)."""
        if len(self._windows) != 1:  # (none being handed out, or the next one packed)
            return
        window = self._windows[0]
        rows = window.row - window.row % MADE_ROWS if self._shape.fixed else window.row
        enough = sum(p.rows * (p.seq_len + 1) for p in window.packings) + rows * window.cap
        if enough and self._read(enough):
            self._pack()

    def _rows(self, window: Window, take: int) -> list[np.ndarray[Any, Any]]:
        """The next ``take`` rows of ``window``, from the rows it made ahead."""
        row = window.row
        if row + take > window.made_to:  # make the next rows, a batch's at least
            end = min(window.fitted.rows, row + max(take, MADE_ROWS))
            window.made = window.fitted.make(row, end, self.dtype, self.segments)
            window.made_from, window.made_to = row, end
        window.row += take
        self._rows_left -= take
        at = row - window.made_from
        return [a[at : at + take] for a in window.made]

    @guarded
    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        if self._skip and self._start is not None:  # its window not read again (take=0)
            return self._start.to_json()
        packings: tuple[Packed, ...] = ()
        if self._windows:
            window = self._windows[0]
            number, row, epoch = window.number, window.row, window.epoch
            documents = self._docs.state(window.mark)
            if row:
                packings = (*window.packings, Packed(window.cap - 1, row))
            elif window.packings:  # packed again, no row of it out (the run ended): as before
                packings, row = window.packings, window.packings[-1].rows
        else:  # every packed row handed out: the next window starts here
            number, row, epoch = self._next, 0, self._epoch
            if self._reading is not None:  # read again on resume
                documents = self._docs.state(self._reading.mark)
            elif self._left is not None:  # documents read, in no window yet
                documents = self._docs.state(self._left[0].mark_before(self._left[1]))
            else:
                documents = self._docs.state(self._at)
        packed, parts = self._packed_now()
        cut: dict[str, Any] = {}
        if row and isinstance(documents, MixtureState):  # what a reshard deals of the window
            cut.update(window_fields(self._windows[0].parts, self._windows[0].mark, documents))
        if row and self._windows[0].short:
            cut["window_documents"] = self._windows[0].short
        if row and (again := window_repeats(self._windows[0].parts)):  # (a reshard deals them)
            cut["window_repeats"] = again
        return BatchesState(
            *self._shape.first(), documents, 0, self._batches,
            "bestfit", self.window, number, row, epoch, self._shape.section(packings),
            packed, parts_to_state(documents, parts), **cut,
        ).to_json()  # fmt: skip

    @property
    @guarded
    def stats(self) -> Stats:
        """The document stream's counts (documents read ahead into packed windows included),
        and what packing did to the documents of the batches handed out (a mixture's: per part
        too, ``packed_stats``)."""
        return packed_stats(self._docs.stats, *self._packed_now())

    def _count(self, window: Window) -> None:
        """Count what packing did in the rows of ``window`` handed out, before its packing goes."""
        self._packed = self._packed.add(*window.fitted.counted(window.row))
        self._parts = add_parts(self._parts, window.fitted.counted_parts(window.row))

    def _packed_now(self) -> tuple[PackingCounts, np.ndarray[Any, Any]]:
        """What packing did to the documents of the batches handed out, and per part."""
        packed, parts = self._packed, self._parts
        for window in list(self._windows):  # begun: the first, and one a batch went into
            packed = packed.add(*window.fitted.counted(window.row))
            parts = add_parts(parts, window.fitted.counted_parts(window.row))
        return packed, parts
