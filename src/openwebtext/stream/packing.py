"""Document-aware packing: rows that say where their documents start (``PackedBatch``), rows of
whole documents placed by best fit (``BestFitBatches``), and the attention layouts the
models take (``cu_seqlens``; the torch mask is ``openwebtext.torch.document_mask``).

Best fit (after "Fewer Truncations Improve Language Modeling", Ding et al., 2024): the stream
is read in windows of ``window`` documents; a document longer than a row is split into
row-sized pieces; the pieces and the shorter documents are placed, longest first, each into
the open row with the least room that still holds it (a new row if none does), so that no
document shorter than a row is ever cut; rows are padded with ``pad_id`` (segment 0) and
handed out in an order seeded by the window's epoch and number in it. A state is the document
stream's state at the start of a window and the rows of that window already handed out:
resuming reads the window again and packs it the same way (the window is rebuilt, never
stored). A resharded epoch's share first packs the windows old ranks had begun (their
documents, numbers and rows handed out come from the stream: ``_windows_ahead``), skipping
those rows, then its own windows.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError
from openwebtext.plan import permutation
from openwebtext.stream.schema import BatchesState, DocumentState
from openwebtext.stream.state import Mark, Stats

__all__ = [
    "PACKING",
    "WINDOW",
    "BestFitBatches",
    "PackedBatch",
    "best_fit",
    "cu_seqlens",
    "segmented",
]

#: The packings ``Loader.batches`` knows: documents end to end, or whole by best fit.
PACKING = ("concat", "bestfit")

#: Documents best fit packs at a time (``Loader.batches(window=…)``).
WINDOW = 4096

#: The stream of randomness of the row order (``plan`` uses 0 and 1).
ROWS = 2


class PackedBatch(NamedTuple):
    """A batch with its documents marked (``Loader.batches(segments=True)``), all (B, L + 1).

    Feed ``tokens[:, :-1]`` with ``segment_ids[:, :-1]`` and ``positions[:, :-1]``; the
    targets are ``tokens[:, 1:]``.
    """

    tokens: np.ndarray[Any, Any]
    segment_ids: np.ndarray[Any, Any]
    """Documents numbered from 1 within each row; 0: padding."""
    positions: np.ndarray[Any, Any]
    """Each id's position in its document (0 at its start; 0 for padding)."""


def segmented(
    tokens: np.ndarray[Any, Any], documents: np.ndarray[Any, Any], positions: np.ndarray[Any, Any]
) -> PackedBatch:
    """The ``PackedBatch`` of rows whose ids belong to ``documents`` (any increasing numbers,
    one per document of the stream) at ``positions``."""
    segment_ids = (documents - documents[:, :1] + 1).astype(np.int32)
    return PackedBatch(tokens, segment_ids, positions.astype(np.int32))


def cu_seqlens(segment_ids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The cumulative sequence lengths of FlashAttention's varlen kernels
    (``flash_attn_varlen_func(cu_seqlens_q=…, cu_seqlens_k=…)``) for rows flattened one after
    another: every run of one segment in a row is a sequence (a run of padding too, so that
    the lengths add up to ``B * L``). int32, starting at 0."""
    ids = np.asarray(segment_ids)
    rows, length = ids.shape
    starts = np.ones(ids.shape, dtype=bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    where = np.flatnonzero(starts.reshape(-1))
    return np.append(where, rows * length).astype(np.int32)


def best_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """Rows of item indices: items longest first, each into the open row with the least room
    that holds it (a new row if none does). ``lengths`` are at most ``capacity``."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)  # stable
    rows: list[list[int]] = []
    # The open rows as room left * m + row, sorted: least room first, then the first row
    # (the order of (room, row) pairs, as ints: there are fewer than m rows).
    m = len(lengths) + 1
    room: list[int] = []
    for k in order:
        n = lengths[k]
        at = bisect.bisect_left(room, n * m)
        if at == len(room):
            rows.append([k])
            left, row = capacity - n, len(rows) - 1
        else:
            left, row = divmod(room.pop(at), m)
            rows[row].append(k)
            left -= n
        if left > 0:
            bisect.insort(room, left * m + row)
    return rows


@dataclass
class _Reading:
    """A window of documents being read (``BestFitBatches``), packed once whole."""

    mark: Mark
    """Where the stream was before its first document."""
    ids: list[np.ndarray[Any, Any]]
    count: int
    """Ids read into it."""
    epoch: int | None
    """Of its documents (None: none read yet)."""
    size: int
    """Documents it holds when whole."""


class BestFitBatches:
    """The running iterator of best-fit packed batches (``Loader.batches(packing="bestfit")``).

    Args:
        documents: The running token documents (``batches.TokenDocuments``, with
            ``_windows_ahead``), started from the ``documents`` state of a saved state.
        seq_len: Ids a row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        seed: Seeds the order of each window's rows.
        pad_id: The id of padding.
        dtype: The dtype of the yielded arrays.
        segments: Yield ``PackedBatch`` records instead of plain arrays.
        window: Documents packed at a time.
        start: ``(window number, its rows handed out, batches before, the epoch of the
            number)`` of a saved state (``batches_start``; the epoch None: the documents').
    """

    def __init__(
        self,
        documents: Any,
        seq_len: int,
        batch_size: int,
        *,
        seed: int,
        pad_id: int,
        dtype: DTypeLike = np.int64,
        segments: bool = False,
        window: int = WINDOW,
        start: tuple[int, int, int, int | None] = (0, 0, 0, None),
    ) -> None:
        self._docs = documents
        self.seq_len, self.batch_size = seq_len, batch_size
        self.dtype = np.dtype(dtype)
        self.seed, self.pad_id, self.segments, self.window = seed, pad_id, segments, window
        # The number the next own window gets, counted within its epoch.
        self._next, self._skip, self._batches, epoch = start
        self._epoch: int = documents.mark().epoch if epoch is None else epoch
        # A resharded share's windows begun by old ranks: (documents, number, rows handed out).
        self._ahead: deque[tuple[int, int, int]] = deque(documents._windows_ahead())
        # Rows packed and not handed out: (window id, its row number, [(ids, first position)]).
        self._rows: deque[tuple[int, int, list[tuple[np.ndarray[Any, Any], int]]]] = deque()
        # Where each window with rows left starts, and the own number the state then says.
        self._marks: dict[int, tuple[Mark, int, int]] = {}
        self._packed = 0  # windows packed by this iterator (their ids)
        self._carry: tuple[Mark, Any, int] | None = None  # read, and the next window's first
        self._ended = False
        self._reading: _Reading | None = None  # the window being read, not yet packed
        self._since = 0  # batches handed out since the last window was packed
        self._pad: np.ndarray[Any, Any] | None = None  # a row of padding ids
        if self._skip:
            try:
                self._fill()
            except BaseException:
                documents.close()
                raise

    def __iter__(self) -> BestFitBatches:
        return self

    def _fill(self) -> None:
        """Read the rest of the window being read, and pack it."""
        if self._read(None):
            self._pack()

    def _read(self, enough: int | None) -> bool:
        """Read documents into the window being read (begun here if none is): to its end, or
        until it holds ``enough`` ids. A window is ``window`` documents (a dealt window's
        own count), or fewer at the end of its epoch, so that an epoch packs the same whatever
        follows it. True when the window being read is whole (False: nothing left to read)."""
        if self._reading is None:
            if self._ended and self._carry is None:
                return False
            size = self._ahead[0][0] if self._ahead else self.window
            if self._carry is not None:  # the next epoch's first document, read already
                mark, first, epoch = self._carry
                self._reading = _Reading(mark, [first.tokens], len(first.tokens), epoch, size)
            else:
                self._reading = _Reading(self._docs.mark(), [], 0, None, size)
            self._carry = None
        reading = self._reading
        while len(reading.ids) < reading.size and (enough is None or reading.count < enough):
            before = self._docs.mark()
            try:
                doc = next(self._docs)
            except StopIteration:
                self._ended = True
                return True
            now = self._docs.mark().epoch
            if reading.epoch is not None and now != reading.epoch:  # the next epoch's first
                self._carry = (before, doc, now)
                reading.size = len(reading.ids)
                return True
            reading.epoch = now
            reading.ids.append(doc.tokens)
            reading.count += len(doc.tokens)
        return len(reading.ids) >= reading.size

    def _pack(self) -> None:
        """Pack the window read into rows, in its seeded order, less the rows handed out."""
        assert self._reading is not None
        mark, ids, epoch = self._reading.mark, self._reading.ids, self._reading.epoch
        self._reading, self._since = None, 0
        if not ids:
            return
        assert epoch is not None
        own = (self._next, self._epoch)  # what a state at this window says
        if self._ahead:  # a window an old rank had begun: its number and rows handed out
            _, number, skip = self._ahead.popleft()
        else:  # an own window: numbered within its epoch
            if epoch != self._epoch:
                self._next, self._epoch = 0, epoch
                own = (0, epoch)
            number, skip, self._next = self._next, 0, self._next + 1
        skip, self._skip = max(skip, self._skip), 0
        cap = self.seq_len + 1
        pieces: list[tuple[np.ndarray[Any, Any], int]] = []
        for doc in ids:  # a document longer than a row: row-sized pieces
            if len(doc) <= cap:
                pieces.append((doc, 0))
            else:
                pieces += [(doc[p : p + cap], p) for p in range(0, len(doc), cap)]
        rows = best_fit([len(piece) for piece, _ in pieces], cap)
        if len(rows) < skip:
            self.close()
            raise StateError(f"bad batches state: row {skip} of a window of {len(rows)} rows")
        shuffled = permutation(len(rows), self.seed, ROWS, epoch, number)
        wid, self._packed = self._packed, self._packed + 1
        if len(rows) > skip:
            self._marks[wid] = (mark, *own)
        for r in range(skip, len(rows)):  # the rows before ``skip`` were handed out
            self._rows.append((wid, r, [pieces[j] for j in rows[shuffled[r]]]))

    def __next__(self) -> Any:
        while len(self._rows) < self.batch_size and (
            self._reading is not None or not self._ended or self._carry
        ):
            self._fill()
        if len(self._rows) < self.batch_size:  # fewer rows than a batch left: dropped
            self.close()
            raise StopIteration
        rows = [self._rows.popleft()[2] for _ in range(self.batch_size)]
        for wid in [w for w in self._marks if not self._rows or w < self._rows[0][0]]:
            del self._marks[wid]
        self._batches += 1
        # Read the next window as the rows go, an id read for each id handed out, so that the
        # workers never wait for a whole window to be asked for at once.
        self._since += 1
        if self._read(self._since * self.batch_size * (self.seq_len + 1)):
            self._pack()
        return self._batch(rows)

    def _batch(self, rows: list[list[tuple[np.ndarray[Any, Any], int]]]) -> Any:
        """The batch of ``rows``: every row's pieces and padding one after another, made
        with a few array operations over the whole batch (not three per piece)."""
        cap = self.seq_len + 1
        if self._pad is None:
            self._pad = np.full(cap, self.pad_id, dtype=self.dtype)
        chunks, lengths, numbers, firsts = [], [], [], []
        for row in rows:
            used = 0
            for s, (piece, first) in enumerate(row, 1):
                chunks.append(piece)
                lengths.append(len(piece))
                numbers.append(s)
                firsts.append(first)
                used += len(piece)
            if used < cap:  # padding: segment 0, position 0
                chunks.append(self._pad[: cap - used])
                lengths += [cap - used]
                numbers += [0]
                firsts += [0]
        shape = (self.batch_size, cap)
        tokens = np.concatenate(chunks, dtype=self.dtype).reshape(shape)
        if not self.segments:
            return tokens
        counts = np.asarray(lengths)
        segment_ids = np.repeat(np.asarray(numbers, dtype=np.int32), counts)
        starts = np.cumsum(counts) - counts  # chunk k's ids are positions firsts[k], ...
        shift = np.repeat((starts - np.asarray(firsts)).astype(np.int32), counts)
        positions = np.arange(tokens.size, dtype=np.int32) - shift
        positions *= segment_ids > 0
        return PackedBatch(tokens, segment_ids.reshape(shape), positions.reshape(shape))

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        if self._rows:
            wid, row, _ = self._rows[0]
            at, number, epoch = self._marks[wid]
            documents = self._docs.state_dict(at)
        else:  # every packed row handed out: the next window starts here
            number, row, epoch = self._next, 0, self._epoch
            if self._reading is not None:  # read again on resume
                documents = self._docs.state_dict(self._reading.mark)
            else:
                documents = self._docs.state_dict(None if self._carry is None else self._carry[0])
        state = BatchesState(
            self.seq_len, self.batch_size, DocumentState.from_json(documents), 0, self._batches,
            "bestfit", self.window, number, row, epoch,
        )  # fmt: skip
        return state.to_json()

    @property
    def stats(self) -> Stats:
        """The document stream's counts (documents read ahead into packed windows included)."""
        stats: Stats = self._docs.stats
        return stats

    def close(self) -> None:
        """Stop the workers now. Safe to call twice."""
        self._docs.close()

    def __enter__(self) -> BestFitBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
