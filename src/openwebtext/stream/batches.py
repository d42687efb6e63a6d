"""Batches: token documents packed into fixed-length training rows, resumable exactly.

The last stage before the model. Documents come from a loader with a
``tokenizer`` (ids made in the workers, each document ending with the
end-of-text id) and are concatenated in stream order; each batch is
``batch_size`` rows of ``seq_len + 1`` ids. Row ``r`` of a batch starting at
token ``p`` is ``tokens[p + r*seq_len : p + (r+1)*seq_len + 1]``, so rows (and
batches) overlap by one id and every id after the first is a target exactly
once: ``x, y = batch[:, :-1], batch[:, 1:]``.

A state is the document stream's state before the document in which the next
batch starts, plus the offset of that start inside the document's ids: resuming
re-reads that one document and cuts it at the same id. Ids left over when the
stream ends (fewer than a batch) are dropped.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError
from openwebtext.options import int_at_least
from openwebtext.records import TokenDocument
from openwebtext.stream.packing import PACKING, PackedBatch, segmented
from openwebtext.stream.schema import BatchesState, DocumentState
from openwebtext.stream.state import Mark, Stats
from openwebtext.tokenizer import Tokenizer

__all__ = ["BatchIterator", "Batches", "TokenDocuments", "batches_start", "check_sizes"]


class TokenDocuments(Protocol):
    """A running iterator of ``TokenDocument`` records with a state (``DocumentIterator``)."""

    def __next__(self) -> Any: ...

    def mark(self) -> Mark: ...

    def state_dict(self, mark: Mark | None = None) -> dict[str, Any]: ...

    # The packers' own view of the stream (private to the library, not the iterator's API):
    def _windows_ahead(self) -> list[tuple[int, int, int]]: ...

    @property
    def _start(self) -> int: ...

    @property
    def stats(self) -> Stats: ...

    def close(self) -> None: ...


Item = TypeVar("Item", covariant=True)


class BatchIterator(Protocol[Item]):
    """What ``Loader.batches`` returns, whatever the packing: an iterator of batches (arrays,
    or ``PackedBatch`` records with ``segments=True``) with a state, to use in ``with``."""

    def __iter__(self) -> BatchIterator[Item]: ...

    def __next__(self) -> Item: ...

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        ...

    @property
    def stats(self) -> Stats:
        """The document stream's counts."""
        ...

    def close(self) -> None:
        """Stop the workers now. Safe to call twice."""
        ...

    def __enter__(self) -> BatchIterator[Item]: ...

    def __exit__(self, *exc: object) -> None: ...


class Batches:
    """The running iterator of packed batches (``Loader.batches``); owns its documents.

    Args:
        documents: The running token documents to pack, started from the
            ``documents`` state of ``batches_start(state, …)`` when resuming.
        vocabulary: The tokenizer that made their ids.
        seq_len: Ids a row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        dtype: The dtype of the yielded arrays (int64 suits embeddings).
        offset: Where the first batch starts in the first document's ids
            (``batches_start``).
        batches: Batches handed out before (``batches_start``).

    Raises:
        ValueError: a size is not positive, or ``dtype`` cannot hold every id
            (``documents`` are then closed).
    """

    def __init__(
        self,
        documents: TokenDocuments,
        vocabulary: Tokenizer,
        seq_len: int,
        batch_size: int,
        *,
        dtype: DTypeLike = np.int64,
        offset: int = 0,
        batches: int = 0,
        segments: bool = False,
    ) -> None:
        self._docs = documents
        self.segments = segments
        try:
            check_sizes(seq_len, batch_size)
            self.dtype = np.dtype(dtype)
            largest = vocabulary.n_vocab - 1
            if self.dtype.kind not in "iu" or np.iinfo(self.dtype).max < largest:
                raise ValueError(f"dtype {self.dtype} cannot hold every id (up to {largest})")
        except BaseException:
            documents.close()
            raise
        self.seq_len = seq_len
        self.batch_size = batch_size
        # Documents not yet fully handed out in batches: (the stream's mark before it, its ids,
        # where they begin in the document: not 0 for one cut across a resharded checkpoint).
        self._pending: deque[tuple[Mark, np.ndarray[Any, Any], int]] = deque()
        self._head = offset  # where the next batch starts in the first pending document
        self._available = -offset  # ids pending from the next batch's start on
        self._batches = batches

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Any:
        """The next batch: an array (B, L + 1), or a ``PackedBatch`` with ``segments``."""
        need = self.seq_len * self.batch_size + 1
        while self._available < need:
            before = self._docs.mark()
            try:
                document: TokenDocument = next(self._docs)
            except StopIteration:
                self.close()
                raise
            self._pending.append((before, document.tokens, self._docs._start))
            self._available += len(document.tokens)
        if self.segments:
            return self._segmented(need)
        rows = overlapping_rows(self._take(need), self.seq_len, self.dtype)
        self._batches += 1
        return rows

    def _segmented(self, need: int) -> PackedBatch:
        """The next batch with its documents and positions (``segments=True``)."""
        lengths, firsts = [], []  # of each document's piece in this batch, and its first id
        head, got = self._head, 0
        for _, ids, start in self._pending:
            n = min(len(ids) - head, need - got)
            lengths.append(n)
            firsts.append(start + head)
            got += n
            head = 0
            if got == need:
                break
        # One array op per batch, not two per document: piece k's ids are document k at
        # positions firsts[k], firsts[k] + 1, ...
        counts = np.asarray(lengths)
        documents = np.repeat(np.arange(len(lengths), dtype=np.int32), counts)
        starts = np.cumsum(counts) - counts  # where each piece begins in the batch
        shift = np.repeat((starts - np.asarray(firsts)).astype(np.int32), counts)
        positions = np.arange(need, dtype=np.int32) - shift
        tokens = overlapping_rows(self._take(need), self.seq_len, self.dtype)
        self._batches += 1
        return segmented(
            tokens,
            overlapping_rows(documents, self.seq_len),
            overlapping_rows(positions, self.seq_len),
        )

    def _take(self, need: int) -> np.ndarray[Any, Any]:
        """The next ``need`` ids; keep the last one for the next batch."""
        parts = []
        head, got = self._head, 0
        for _, ids, _ in self._pending:
            part = ids[head : head + need - got]
            parts.append(part)
            got += len(part)
            head = 0
            if got == need:
                break
        # Advance by need - 1: drop documents whose ids all lie before the new start.
        advance = self._head + need - 1
        while advance >= len(self._pending[0][1]):
            advance -= len(self._pending.popleft()[1])
        self._head = advance
        self._available -= need - 1
        return np.concatenate(parts)

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        mark = self._pending[0][0] if self._pending else None
        documents, offset = self._docs.state_dict(mark), self._head
        state = BatchesState(
            self.seq_len, self.batch_size, DocumentState.from_json(documents), offset, self._batches
        )
        return state.to_json()

    @property
    def stats(self) -> Stats:
        """The document stream's counts (documents read ahead into the pending batch included)."""
        return self._docs.stats

    def close(self) -> None:
        """Stop the workers now. Safe to call twice."""
        self._docs.close()

    def __enter__(self) -> Batches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def check_sizes(seq_len: int, batch_size: int) -> None:
    """Refuse a ``seq_len`` or ``batch_size`` that is not an int >= 1 (``ValueError``)."""
    for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if not int_at_least(value, 1):
            raise ValueError(f"{name} must be an int >= 1, not {value!r}")


def batches_start(
    state: Any, seq_len: int, batch_size: int, packing: str = "concat", window: int = 1
) -> BatchesState | None:
    """A saved ``state_dict()`` of batches, parsed and checked against the batches about to
    start from it (None: a fresh start).

    Raises:
        ValueError: a size is not positive, an unknown packing, or a window that is not a
            positive int.
        StateError: ``state`` is not a batches state, or was saved for other sizes, another
            packing or window.
    """
    check_sizes(seq_len, batch_size)
    if packing not in PACKING:
        raise ValueError(f"packing must be one of {PACKING}, not {packing!r}")
    if not int_at_least(window, 1):
        raise ValueError(f"window must be an int >= 1, not {window!r}")
    if state is None:
        return None
    parsed = BatchesState.from_json(state)
    if (parsed.seq_len, parsed.batch_size) != (seq_len, batch_size):
        raise StateError(
            f"the state was saved for seq_len={parsed.seq_len}, batch_size={parsed.batch_size}; "
            f"now seq_len={seq_len}, batch_size={batch_size}"
        )
    if parsed.packing != packing or (packing == "bestfit" and parsed.window != window):
        saved_window = parsed.window if parsed.packing == "bestfit" else window
        raise StateError(
            f"the state was saved for packing={parsed.packing!r}, window={saved_window}; now "
            f"packing={packing!r}, window={window}"
        )
    return parsed
