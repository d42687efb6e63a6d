"""Document-aware packing: rows that say where their documents start (``PackedBatch``), rows of
whole documents placed by best fit (``BestFitBatches``), and the attention layouts the
models take (``cu_seqlens``; the torch mask is ``openwebtext.torch.document_mask``).

Best fit (after "Fewer Truncations Improve Language Modeling", Ding et al., 2024): the stream
is read in windows of ``window`` documents; a document longer than a row is split into
row-sized pieces; the pieces and the shorter documents are placed, longest first, each into
the open row with the least room that still holds it (a new row if none does), so that no
document shorter than a row is ever cut; rows are padded with ``pad_id`` (segment 0) and
handed out in a seeded order. A state is the document stream's state at the start of a window
and the rows of that window already handed out: resuming reads the window again and packs it
the same way (the window is rebuilt, never stored).
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError
from openwebtext.options import int_at_least
from openwebtext.plan import permutation
from openwebtext.stream.state import Mark, Stats

__all__ = [
    "PACKING",
    "WINDOW",
    "BestFitBatches",
    "PackedBatch",
    "best_fit",
    "cu_seqlens",
    "packing_start",
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
    order = sorted(range(len(lengths)), key=lambda k: -lengths[k])
    rows: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (room left, row), sorted
    for k in order:
        n = lengths[k]
        at = bisect.bisect_left(room, (n, -1))
        if at == len(room):
            rows.append([k])
            left, row = capacity - n, len(rows) - 1
        else:
            left, row = room.pop(at)
            rows[row].append(k)
            left -= n
        if left > 0:
            bisect.insort(room, (left, row))
    return rows


def packing_start(state: Any, packing: str, window: int) -> tuple[int, int]:
    """``(window number, rows of it handed out)`` of a saved batches state of ``packing``.

    Raises:
        ValueError: an unknown packing, or a window that is not a positive int.
        StateError: the state was saved with another packing or window.
    """
    if packing not in PACKING:
        raise ValueError(f"packing must be one of {PACKING}, not {packing!r}")
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise ValueError(f"window must be an int >= 1, not {window!r}")
    if state is None:
        return 0, 0
    saved = (state.get("packing", "concat"), state.get("window", WINDOW))
    if saved[0] != packing or (packing == "bestfit" and saved[1] != window):
        raise StateError(
            f"the state was saved for packing={saved[0]!r}, window={saved[1]}; now "
            f"packing={packing!r}, window={window}"
        )
    number, row = state.get("window_number", 0), state.get("row", 0)
    for name, value in (("window_number", number), ("row", row)):
        if not int_at_least(value, 0):
            raise StateError(f"bad batches state: {name} is {value!r}")
    return number, row


class BestFitBatches:
    """The running iterator of best-fit packed batches (``Loader.batches(packing="bestfit")``).

    Args:
        documents: The running token documents (``batches.TokenDocuments``), started from the
            ``documents`` state of a saved state.
        seq_len: Ids a row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        seed: Seeds the order of each window's rows.
        pad_id: The id of padding.
        dtype: The dtype of the yielded arrays.
        segments: Yield ``PackedBatch`` records instead of plain arrays.
        window: Documents packed at a time.
        start: ``(window number, its rows handed out, batches before)`` of a saved state.
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
        start: tuple[int, int, int] = (0, 0, 0),
    ) -> None:
        self._docs = documents
        self.seq_len, self.batch_size = seq_len, batch_size
        self.dtype = np.dtype(dtype)
        self.seed, self.pad_id, self.segments, self.window = seed, pad_id, segments, window
        self._next, skip, self._batches = start  # the number of the next window to pack
        # Rows packed and not handed out: (window, its row number, [(ids, first position)]).
        self._rows: deque[tuple[int, int, list[tuple[np.ndarray[Any, Any], int]]]] = deque()
        self._marks: dict[int, Mark] = {}  # where each window with rows left starts
        self._carry: tuple[Mark, Any, int] | None = None  # read, and the next window's first
        self._ended = False
        if skip:
            self._fill()
            if len(self._rows) < skip:
                documents.close()
                raise StateError(
                    f"bad batches state: row {skip} of a window of {len(self._rows)} rows"
                )
            for _ in range(skip):
                self._rows.popleft()

    def __iter__(self) -> BestFitBatches:
        return self

    def _fill(self) -> None:
        """Read and pack the next window of documents (a window ends with its epoch, so that
        an epoch packs the same whatever follows it)."""
        epoch = None  # of the window's documents
        if self._carry is not None:
            mark, first, epoch = self._carry
            ids = [first.tokens]
        else:
            mark, ids = self._docs.mark(), []
        self._carry = None
        while len(ids) < self.window:
            before = self._docs.mark()
            try:
                doc = next(self._docs)
            except StopIteration:
                self._ended = True
                break
            now = self._docs.mark().epoch
            if epoch is not None and now != epoch:  # the next epoch's first document
                self._carry = (before, doc, now)
                break
            epoch = now
            ids.append(doc.tokens)
        if not ids:
            return
        number, self._next = self._next, self._next + 1
        cap = self.seq_len + 1
        pieces: list[tuple[np.ndarray[Any, Any], int]] = []
        for doc in ids:  # a document longer than a row: row-sized pieces
            pieces += [(doc[p : p + cap], p) for p in range(0, len(doc), cap)]
        rows = best_fit([len(piece) for piece, _ in pieces], cap)
        shuffled = permutation(len(rows), self.seed, ROWS, number)
        if rows:
            self._marks[number] = mark
        for r, k in enumerate(shuffled):
            self._rows.append((number, r, [pieces[j] for j in rows[k]]))

    def __next__(self) -> Any:
        while len(self._rows) < self.batch_size and (not self._ended or self._carry):
            self._fill()
        if len(self._rows) < self.batch_size:  # fewer rows than a batch left: dropped
            self.close()
            raise StopIteration
        cap = self.seq_len + 1
        tokens = np.full((self.batch_size, cap), self.pad_id, dtype=self.dtype)
        segment_ids = np.zeros((self.batch_size, cap), dtype=np.int32)
        positions = np.zeros((self.batch_size, cap), dtype=np.int32)
        for b in range(self.batch_size):
            _, _, row = self._rows.popleft()
            at = 0
            for s, (piece, first) in enumerate(row, 1):
                n = len(piece)
                tokens[b, at : at + n] = piece
                segment_ids[b, at : at + n] = s
                positions[b, at : at + n] = np.arange(first, first + n)
                at += n
        for number in [w for w in self._marks if not self._rows or w < self._rows[0][0]]:
            del self._marks[number]
        self._batches += 1
        return PackedBatch(tokens, segment_ids, positions) if self.segments else tokens

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        if self._rows:
            number, row, _ = self._rows[0]
            documents = self._docs.state_dict(self._marks[number])
        else:  # every packed row handed out: the next window starts here
            number, row = self._next, 0
            mark = None if self._carry is None else self._carry[0]
            documents = self._docs.state_dict(mark)
        return {
            "format": "openwebtext-batches/1",
            "seq_len": self.seq_len,
            "batch_size": self.batch_size,
            "documents": documents,
            "offset": 0,
            "batches": self._batches,
            "packing": "bestfit",
            "window": self.window,
            "window_number": number,
            "row": row,
        }

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
