"""What a packer hands out with ``segments=True``: ``PackedBatch`` (rows that say where their
documents start, and a mixture's, the part of every id), made by ``segmented``, and the
varlen layout of its segments (``cu_seqlens``; the torch masks are ``openwebtext.torch``'s)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["PackedBatch", "cu_seqlens", "segmented"]


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
    sources: np.ndarray[Any, Any] | None = None
    """A mixture's: each id's part, its index in ``Mixture.names`` (int16; -1 for padding),
    e.g. for a loss per part; None: one corpus."""


def segmented(
    tokens: np.ndarray[Any, Any],
    documents: np.ndarray[Any, Any],
    positions: np.ndarray[Any, Any],
    sources: np.ndarray[Any, Any] | None = None,
) -> PackedBatch:
    """The ``PackedBatch`` of rows whose ids belong to ``documents`` (any increasing numbers,
    one per document of the stream) at ``positions`` (of a mixture: from ``sources``).
    Segments are numbered from 1 by the documents a row holds: a document of no id (a token
    file's may hold none) numbers none, though the stream counts it."""
    segment_ids = np.ones(documents.shape, dtype=np.int32)
    np.cumsum(documents[:, 1:] != documents[:, :-1], axis=1, out=segment_ids[:, 1:])
    segment_ids[:, 1:] += 1
    return PackedBatch(tokens, segment_ids, positions.astype(np.int32), sources)


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
