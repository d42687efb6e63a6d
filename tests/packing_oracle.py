"""The packers written the straightforward way, a document at a time (test-only oracles).

``BestFitBatches`` and ``Batches`` pack runs of documents with array operations; these
functions pack a plain list of documents one by one, as the packers did before (issue 37), and
must give the same batches: best fit places pieces longest first by a bisect over the open
rows' room, a window at a time, and builds every row piece by piece.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from openwebtext.plan import permutation
from openwebtext.stream.packing import ROWS


def best_fit_lists(lengths: list[int], capacity: int) -> list[list[int]]:
    """Rows of item indices, items longest first into the open row with the least room (an
    item of length 0 with no room left: into the last row opened; with no row, into none)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)
    rows: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (room left, row), sorted
    for k in order:
        n = lengths[k]
        at = bisect.bisect_left(room, (n, -1))
        if at == len(room) and n == 0:
            if rows:
                rows[-1].append(k)
            continue
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


def best_fit_batches(
    documents: list[np.ndarray[Any, Any]],
    seq_len: int,
    batch_size: int,
    *,
    seed: int,
    pad_id: int,
    window: int,
    epoch: int = 0,
) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The (tokens, segment ids, positions) batches of best fit over ``documents`` (one
    epoch), the last rows short of a batch dropped."""
    cap = seq_len + 1
    rows: list[list[tuple[np.ndarray[Any, Any], int]]] = []
    for number, w in enumerate(range(0, len(documents), window)):
        pieces = []
        for doc in documents[w : w + window]:
            if len(doc) <= cap:
                pieces.append((doc, 0))
            else:
                pieces += [(doc[p : p + cap], p) for p in range(0, len(doc), cap)]
        packed = best_fit_lists([len(piece) for piece, _ in pieces], cap)
        shuffled = permutation(len(packed), seed, ROWS, epoch, number)
        rows += [[pieces[j] for j in packed[shuffled[r]]] for r in range(len(packed))]
    batches = []
    for b in range(len(rows) // batch_size):
        tokens = np.full((batch_size, cap), pad_id, dtype=np.int64)
        segments = np.zeros((batch_size, cap), dtype=np.int32)
        positions = np.zeros((batch_size, cap), dtype=np.int32)
        for r, row in enumerate(rows[b * batch_size : (b + 1) * batch_size]):
            at = 0
            for s, (piece, first) in enumerate(row, 1):
                tokens[r, at : at + len(piece)] = piece
                segments[r, at : at + len(piece)] = s
                positions[r, at : at + len(piece)] = np.arange(first, first + len(piece))
                at += len(piece)
        batches.append((tokens, segments, positions))
    return batches


def concat_batches(
    documents: list[np.ndarray[Any, Any]], seq_len: int, batch_size: int
) -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    """The (tokens, segment ids, positions) batches of documents end to end, rows
    overlapping by one id, the ids short of a batch at the end dropped."""
    ids = np.concatenate([*documents, np.zeros(0, np.int64)]).astype(np.int64)
    number = np.repeat(np.arange(len(documents)), [len(d) for d in documents])
    position = np.concatenate([np.arange(len(d)) for d in documents] + [np.zeros(0, np.int64)])
    step, batches = seq_len * batch_size, []
    for p in range(0, len(ids) - step, step):
        rows = [slice(p + r * seq_len, p + (r + 1) * seq_len + 1) for r in range(batch_size)]
        tokens = np.stack([ids[row] for row in rows])
        # A row's documents numbered from 1 in turn (a document of no id numbers none).
        segments = np.stack([np.cumsum(np.diff(number[row], prepend=number[row][0]) != 0) + 1
                             for row in rows])  # fmt: skip
        batches.append((tokens, segments.astype(np.int32), np.stack([position[r] for r in rows])))
    return batches
