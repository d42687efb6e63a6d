"""Best fit's arithmetic over one window: rows chosen on the documents' lengths alone, then
made from slices of their ids (``BestFitBatches`` reads the windows and keeps the state).

A document longer than a row is cut into row-sized pieces; the pieces are placed longest first,
each into the open row with the least room that still holds it (``best_fit_rows``: the one
loop in Python, per piece, but for a run of pieces of one length, placed at once: a window's
pieces packed again at a longer row are nearly all of the old row's length); the rows are put
in their seeded order, and each row is a run of chunks (its pieces, then its padding)
described by arrays, so that a block of rows is made by one join of the bytes of its chunks'
slices (``Rows.make``; segment ids by one repeat, positions by one join of slices of a ramp),
one slice per chunk the only Python left.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError
from openwebtext.stream.partpacking import NO_PARTS
from openwebtext.stream.source import Run

__all__ = ["Rows", "best_fit", "best_fit_rows", "fit", "fit_documents", "padding_row"]


def best_fit(lengths: list[int], capacity: int) -> list[list[int]]:
    """Rows of item indices: items longest first, each into the open row with the least room
    that holds it (a new row if none does; an item of length 0, the last row opened, none if
    there is none). ``lengths`` are at most ``capacity``."""
    row_of, order = best_fit_rows(np.asarray(lengths, dtype=np.int64), capacity)
    rows: list[list[int]] = [[] for _ in range(int(row_of.max()) + 1 if len(row_of) else 0)]
    for k in order.tolist():
        if row_of[k] >= 0:
            rows[row_of[k]].append(k)
    return rows


#: Items of one length, one after another in best fit's order, that are placed at once
#: (``_place_run``); fewer are placed one at a time (a run's array work costs what some tens
#: of items placed one by one cost).
RUN = 32


def best_fit_rows(
    lengths: np.ndarray[Any, Any], capacity: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``best_fit`` as arrays: the row of each item (rows numbered as opened; -1, none: an
    item of length 0 when no row is open) and the order the items were placed in (a row
    holds its items in that order)."""
    order = np.argsort(-lengths, kind="stable")  # longest first, ties in their order
    row_of = np.empty(len(lengths), dtype=np.int64)
    # The open rows as room left * m + row, sorted: least room first, then the first row
    # (the order of (room, row) pairs, as ints: there are fewer than m rows).
    m = len(lengths) + 1
    # Items that fill a row come first (none smaller is placed before them): a row each. So do
    # the items longer than half a row after them: a row's room is then a row less an item at
    # least as long, shorter than the item. Their rooms come in order (least first).
    full = int(np.count_nonzero(lengths >= capacity))
    rows = full + int(np.count_nonzero((lengths < capacity) & (lengths > capacity // 2)))
    rooms = capacity - lengths[order[full:rows]]
    room: list[int] = (rooms * m + np.arange(full, rows)).tolist()
    placed = np.empty(len(lengths), dtype=np.int64)  # each item's row, as placed
    placed[:rows] = np.arange(rows)
    rest, into = lengths[order[rows:]], placed[rows:]
    # The rest one at a time, but for runs of RUN or more of one length (a window packed
    # again: nearly all its pieces are of the old row's length), each placed at once.
    edges = np.flatnonzero(rest[1:] != rest[:-1]) + 1
    begins, ends = np.append(0, edges), np.append(edges, len(rest))
    long = np.flatnonzero(ends - begins >= RUN)
    at = 0
    for begin, end in zip(begins[long].tolist(), ends[long].tolist(), strict=True):
        if at < begin:
            rows = _place_each(rest[at:begin].tolist(), room, capacity, m, rows, into[at:begin])
        rows = _place_run(int(rest[begin]), room, capacity, m, rows, into[begin:end])
        at = end
    if at < len(rest):
        _place_each(rest[at:].tolist(), room, capacity, m, rows, into[at:])
    row_of[order] = placed
    return row_of, order


def _place_each(
    lengths: list[int], room: list[int], capacity: int, m: int, rows: int,
    into: np.ndarray[Any, Any],
) -> int:  # fmt: skip
    """Place ``lengths`` one at a time into the open rows ``room`` (``best_fit_rows``'), of
    which ``rows`` are opened; their rows ``into``; the rows opened then."""
    bisect_left, insort = bisect.bisect_left, bisect.insort
    out: list[int] = []
    for n in lengths:
        at = bisect_left(room, n * m)
        if at == len(room) and not n:  # no id, every row full: the last opened holds it
            out.append(rows - 1)  # (-1: no row at all, a window of no id: no row)
            continue
        if at == len(room):
            row, left, rows = rows, capacity - n, rows + 1
        else:
            left, row = divmod(room.pop(at), m)
            left -= n
        out.append(row)
        if left > 0:
            insort(room, left * m + row)
    into[:] = out
    return rows


def _place_run(
    n: int, room: list[int], capacity: int, m: int, rows: int, into: np.ndarray[Any, Any]
) -> int:
    """``_place_each`` of ``len(into)`` items of length ``n``, at once. One at a time, an item
    goes into the row the one before it went into while that row holds it (its room left is
    then the least that does: there was none between), so the rows that hold one are filled
    in their order (least room first), each with as many as it holds, then new rows with as
    many as a row holds; items of length 0 all go where the first goes (the least room)."""
    count = len(into)
    if not n:  # (the last opened, or none: -1, if no row has room)
        into[:] = room[0] % m if room else rows - 1
        return rows
    at = bisect.bisect_left(room, n * m)
    held = np.asarray(room[at : at + count], dtype=np.int64)  # (each holds one at least)
    left = held // m
    takes = left // n
    taken = np.cumsum(takes)
    last = int(np.searchsorted(taken, count))  # the row the last item goes into
    if last < len(held):
        held, left, takes = held[: last + 1], left[: last + 1], takes[: last + 1]
        takes[last] = count - (int(taken[last - 1]) if last else 0)
        more = 0
    else:  # every row that holds one filled: new rows for the rest
        more = count - (int(taken[-1]) if len(taken) else 0)
    del room[at : at + len(held)]
    those = held - left * m  # their rows
    left -= takes * n
    into[: count - more] = np.repeat(those, takes)
    keys = [(left * m + those)[left > 0]]
    if more:
        each = capacity // n
        opened = -(-more // each)
        new = np.arange(rows, rows + opened)
        takes = np.full(opened, each)
        takes[-1] = more - (opened - 1) * each
        into[count - more :] = np.repeat(new, takes)
        left = capacity - takes * n
        keys.append((left * m + new)[left > 0])
        rows += opened
    added = np.sort(np.concatenate(keys)).tolist()
    if len(added) < RUN:
        for key in added:
            bisect.insort(room, key)
    else:  # (one merge of two sorted runs)
        room.extend(added)
        room.sort()
    return rows


@dataclass
class Rows:
    """A packed window's rows, from row ``skip`` on in their seeded order: row ``skip + r`` is
    chunks ``row_chunks[r]..row_chunks[r + 1]``, chunk ``k`` the ids
    ``sources[sourced[k]][starts[k]:ends[k]]`` (chunks without ids left out)."""

    rows: int
    """Rows of the window (those before ``skip`` were handed out before)."""
    skip: int
    sources: list[np.ndarray[Any, Any]]
    """The ids the documents are in, then a row of padding."""
    sourced: np.ndarray[Any, Any]
    starts: np.ndarray[Any, Any]
    ends: np.ndarray[Any, Any]
    numbers: np.ndarray[Any, Any]
    """Of the chunk's document in its row, from 1 (0: padding)."""
    bases: np.ndarray[Any, Any]
    """Where the chunk's ids lie among the rows' (counted from row ``skip``) less where they
    begin in its document: an id's position is its place less its chunk's base (padding's
    base is where its chunk ends: its places less it are below 0, its positions 0)."""
    cut: np.ndarray[Any, Any]
    """The chunk is a piece of a document cut (in this packing or one before it)."""
    row_chunks: np.ndarray[Any, Any]
    packed: np.ndarray[Any, Any]
    """Per row from row ``skip`` on, what packing did to the documents in the rows before it
    (``counters.PackingCounts``'s padding ids, cut documents, pieces): shape (3, rows + 1)."""
    _ramp: np.ndarray[Any, Any] = field(default_factory=lambda: np.arange(0, dtype=np.int32))
    _views: list[memoryview] | None = None
    labels: list[np.ndarray[Any, Any]] | None = None
    """A mixture's: beside each of ``sources``, its ids' parts (padding's -1); made into
    ``PackedBatch.sources`` by the same slices."""
    parts: np.ndarray[Any, Any] | None = None
    """A mixture's: each chunk's part (padding's -1)."""
    part_cuts: tuple[np.ndarray[Any, Any], ...] = ()
    """A mixture's: the chunks that are pieces of cut documents, their parts, and whether each
    is its document's first piece (what ``counted_parts`` counts)."""

    def counted(self, row: int) -> tuple[int, int, int]:
        """``PackingCounts``'s counts of rows ``skip..row``."""
        padding_ids, cut_documents, pieces = self.packed[:, row - self.skip].tolist()
        return padding_ids, cut_documents, pieces

    def counted_parts(self, row: int) -> np.ndarray[Any, Any]:
        """``counted``'s cut documents and pieces of rows ``skip..row`` per part
        (``counters.NO_PARTS``' shape; a corpus's: none)."""
        if not self.part_cuts:
            return NO_PARTS
        at, parts, firsts = self.part_cuts
        k = int(np.searchsorted(at, self.row_chunks[row - self.skip]))
        cut = np.bincount(parts[:k], weights=firsts[:k])
        counts = np.stack([cut, np.bincount(parts[:k], minlength=len(cut))])
        return counts.astype(np.int64)

    def ramp(self, n: int) -> np.ndarray[Any, Any]:
        """0, 1, ..., n - 1 (int32), kept for the next rows."""
        if len(self._ramp) < n:
            self._ramp = np.arange(n, dtype=np.int32)
        return self._ramp[:n]

    def views(self) -> list[memoryview] | None:
        """The sources as memoryviews, kept (None: their dtypes differ)."""
        if self._views is None:
            kinds = {source.dtype for source in self.sources}
            if len(kinds) == 1 and all(s.flags.c_contiguous for s in self.sources):
                self._views = [source.data for source in self.sources]
            else:
                self._views = []
        return self._views or None

    def make(
        self, row: int, end: int, dtype: DTypeLike, segments: bool
    ) -> tuple[np.ndarray[Any, Any], ...]:
        """Rows ``row..end`` (of the window's): their ids, and with ``segments`` their segment
        ids and positions, each made by one join of memoryview slices (or one repeat): a
        memoryview's slice and ``bytes.join`` cost a fraction of a NumPy slice and
        ``np.concatenate``'s per-array work, the only work per chunk."""
        a, b = self.row_chunks[row - self.skip], self.row_chunks[end - self.skip]
        starts, ends = self.starts[a:b], self.ends[a:b]
        which, i, j = self.sourced[a:b].tolist(), starts.tolist(), ends.tolist()
        views = self.views()
        if views is not None:  # the slices' bytes joined: far less per chunk than an array's
            joined = b"".join([views[w][p:q] for w, p, q in zip(which, i, j, strict=True)])
            tokens = np.frombuffer(joined, self.sources[0].dtype).astype(dtype)
        else:  # sources of dtypes of their own: in their common dtype, converted at once
            ids = self.sources
            chunks = [ids[w][p:q] for w, p, q in zip(which, i, j, strict=True)]
            tokens = np.concatenate(chunks).astype(dtype, copy=False)
        shape = (end - row, -1)
        if not segments:
            return (tokens.reshape(shape),)
        counts = ends - starts
        segment_ids = np.repeat(self.numbers[a:b], counts)
        # Positions: each chunk's a slice of a ramp from where it begins in its document
        # (its first place less its base), padding's of zeros; their bytes joined.
        first = (row - self.skip) * (len(tokens) // (end - row))
        begins = first + np.cumsum(counts) - counts - self.bases[a:b]
        pad = self.numbers[a:b] == 0
        begins[pad] = 0
        ramp = self.ramp(int((begins + counts).max())).data
        zeros = np.zeros(int(counts[pad].max(initial=0)), np.int32).data
        spans = zip(pad.tolist(), begins.tolist(), counts.tolist(), strict=True)
        placed = bytearray().join([(zeros if z else ramp)[p : p + n] for z, p, n in spans])
        positions = np.frombuffer(placed, np.int32)  # writable: a bytearray's
        made = (tokens.reshape(shape), segment_ids.reshape(shape), positions.reshape(shape))
        if self.labels is None:
            return made
        labels = self.labels
        parts = [labels[w][p:q] for w, p, q in zip(which, i, j, strict=True)]
        return (*made, np.concatenate(parts).reshape(shape))

    def again(
        self, row: int, cap: int, skip: int, seeded: Callable[[int], Sequence[int]], pad: Any
    ) -> Rows | None:
        """The rows from ``row`` on (of the window's) packed again at ``cap`` ids a row, from
        row ``skip`` on (``pad``: the new row of padding): ``pieces`` given to ``fit``."""
        documents, lengths, bases, cut = self.pieces(row)
        documents[0].append(pad)
        labels = self.labels
        if labels is not None:  # the last is the old row of padding
            labels = [*labels[:-1], np.full(cap, -1, np.int16)]
        parts = None if self.parts is None else self.parts[self._kept(row)]
        return fit(documents, lengths, cap, seeded, skip, bases, labels=labels, cut=cut,
                   parts=parts)  # fmt: skip

    def _kept(self, row: int) -> np.ndarray[Any, Any]:
        """The chunks of rows ``row..`` that are pieces (not padding), in their order."""
        a = int(self.row_chunks[row - self.skip])
        kept: np.ndarray[Any, Any] = a + np.flatnonzero(self.numbers[a:])
        return kept

    def pieces(
        self, row: int
    ) -> tuple[
        tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any], np.ndarray[Any, Any]],
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
        np.ndarray[Any, Any],
    ]:
        """The pieces of rows ``row..`` (of the window's), in their order, as ``fit`` takes
        items: ``(sources without the row of padding, source, start)``, their lengths, where
        each begins in its document and whether its document was cut (to pack them again at
        another length)."""
        counts = self.ends - self.starts
        places = np.cumsum(counts) - counts  # where each chunk's ids lie among the rows'
        kept = self._kept(row)
        starts = self.starts[kept]
        documents = (self.sources[:-1], self.sourced[kept], starts)
        bases = places[kept] - self.bases[kept]
        return documents, self.ends[kept] - starts, bases, self.cut[kept]


def fit(
    documents: tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any], np.ndarray[Any, Any]],
    lengths: np.ndarray[Any, Any],
    cap: int,
    seeded: Callable[[int], Sequence[int]],
    skip: int,
    bases: np.ndarray[Any, Any] | None = None,
    *,
    labels: list[np.ndarray[Any, Any]] | None = None,
    cut: np.ndarray[Any, Any] | None = None,
    parts: np.ndarray[Any, Any] | None = None,
) -> Rows | None:
    """The rows of a window of documents, from row ``skip`` on (None: no row left).

    Args:
        documents: ``(sources, source, start)``: document ``d`` begins at
            ``sources[source[d]][start[d]]``; ``sources[-1]`` is a row of padding.
        lengths: The documents' lengths.
        cap: Ids a row holds.
        seeded: The rows' order, given their count: row ``r`` is the ``seeded(n)[r]``-th row
            best fit opened.
        skip: Rows handed out before.
        bases: Where each item begins in its document (None: at 0, whole documents); items
            that are pieces of documents (``Rows.pieces``) go on at their positions.
        labels: A mixture's: each of the sources' ids' parts (``Rows.labels``).
        cut: Whether each item's document was cut before (``Rows.pieces``; None: none
            was): what packing did counts its pieces, and its document once.
        parts: A mixture's: each item's part (its index), to count what packing did per
            part (``Rows.counted_parts``).

    Raises:
        StateError: there are fewer than ``skip`` rows (a damaged state).
    """
    sources, source, start = documents
    document, firsts, piece_lengths, piece_cut = _split(lengths, cap, cut)
    row_of, order = best_fit_rows(piece_lengths, cap)
    rows = int(row_of.max()) + 1 if len(row_of) else 0
    if rows < skip:
        raise StateError(
            f"bad batches state: row {skip} of a window of {rows} rows: the window read again "
            "is not the state's (a state of a run that read on past where this one ends, "
            "resumed with fewer epochs: give the epochs it was taken with, or more)", "row"
        )
    if rows == skip:  # (none left, or no row: documents of no id in a window of none)
        return None
    at = np.empty(rows, dtype=np.int64)  # each row's place in the seeded order
    at[np.asarray(seeded(rows))] = np.arange(rows)
    # The pieces of the rows not handed out, by row, then as placed: one sort of each
    # piece's row's place and its own, as one int (the place of the row * pieces + its own).
    placed = len(order)
    keys = at[row_of][order]
    keys *= placed
    keys += np.arange(placed)
    keys.sort()
    row, kept = np.divmod(keys[np.searchsorted(keys, skip * placed) :], placed)
    row -= skip  # of the rows not handed out, in their order
    kept = order[kept]
    length, piece_cut = piece_lengths[kept], piece_cut[kept]
    if document is None or firsts is None:  # (a piece each: the document itself, from 0)
        document, first = kept, np.zeros(len(kept), dtype=np.int64)
    else:
        document, first = document[kept], firsts[kept]
    begin = first if bases is None else bases[document] + first  # in the document
    n = rows - skip
    per_row = np.bincount(row, minlength=n)
    used = np.bincount(row, weights=length, minlength=n).astype(np.int64)
    number = np.arange(1, len(row) + 1)  # in its row, from 1
    number -= (np.cumsum(per_row) - per_row)[row]
    # What packing did, per row: its padding, its first pieces of cut documents, its pieces
    # (a document cut before, packed again: its pieces, its first piece counted before).
    packed = np.zeros((3, n + 1), dtype=np.int64)
    packed[0, 1:] = cap - used
    packed[1, 1:] = np.bincount(row, weights=piece_cut & (begin == 0), minlength=n)
    packed[2, 1:] = np.bincount(row, weights=piece_cut, minlength=n)
    np.cumsum(packed, axis=1, out=packed)
    if not length.all():  # (a piece of no id, an empty document's, is in no chunk)
        held = length > 0
        row, document, length, first, begin, piece_cut, number = (
            a[held] for a in (row, document, length, first, begin, piece_cut, number)
        )
    # Row r's chunks: its pieces, then its padding if it has any (a chunk of the row of
    # padding); piece i after the pieces and the padding of the rows before it.
    padded = used < cap
    chunk: np.ndarray[Any, Any] = (np.cumsum(padded) - padded)[row]
    chunk += np.arange(len(row))
    row_chunks = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n) + padded, out=row_chunks[1:])
    chunks = int(row_chunks[-1])
    sourced = np.full(chunks, len(sources) - 1, dtype=np.int64)
    starts = np.zeros(chunks, dtype=np.int64)
    ends = np.zeros(chunks, dtype=np.int64)
    numbers = np.zeros(chunks, dtype=np.int32)
    sourced[chunk] = source[document]
    begins = start[document] + first
    starts[chunk] = begins
    begins += length
    ends[chunk] = begins
    ends[row_chunks[1:][padded] - 1] = (cap - used)[padded]
    numbers[chunk] = number
    # Where each chunk's ids lie among the rows' (the rows are cap ids each), less where they
    # begin in the document; padding's: where its chunk ends.
    places = ends - starts
    np.cumsum(places, out=places)
    places[chunk] -= length + begin
    cuts = np.zeros(chunks, dtype=bool)
    cuts[chunk] = piece_cut
    fitted = Rows(rows, skip, sources, sourced, starts, ends, numbers, places, cuts, row_chunks,
                  packed, labels=labels)  # fmt: skip
    if parts is not None:  # a mixture's: each chunk's part, and its cut chunks'
        fitted.parts = np.full(chunks, -1, dtype=np.int64)
        fitted.parts[chunk] = parts[document]
        first_of = np.zeros(chunks, dtype=bool)
        first_of[chunk] = piece_cut & (begin == 0)
        at = np.flatnonzero(cuts)
        fitted.part_cuts = (at, fitted.parts[at], first_of[at])
    return fitted


def _split(
    lengths: np.ndarray[Any, Any], cap: int, cut: np.ndarray[Any, Any] | None
) -> tuple[np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None, np.ndarray[Any, Any],
           np.ndarray[Any, Any]]:  # fmt: skip
    """``fit``'s items as pieces: a document longer than a row cut into row-sized pieces
    (one piece per shorter document): each piece's document and where it begins in it (None:
    none is cut, each piece its document, as when a window's pieces are packed again at a
    longer row), its length and whether its document is cut (now or, ``cut``, before)."""
    if not len(lengths) or int(lengths.max()) <= cap:
        piece_cut = np.zeros(len(lengths), dtype=bool) if cut is None else cut
        return None, None, lengths.astype(np.int64, copy=False), piece_cut
    pieces = np.maximum(-(-lengths // cap), 1)
    document = np.repeat(np.arange(len(lengths)), pieces)
    firsts = (np.arange(len(document)) - np.repeat(np.cumsum(pieces) - pieces, pieces)) * cap
    piece_cut = pieces[document] > 1
    if cut is not None:
        piece_cut |= cut[document]
    return document, firsts, np.minimum(lengths[document] - firsts, cap), piece_cut


def fit_documents(
    parts: list[tuple[Run, int, int]], cap: int, pad_id: int, dtype: np.dtype[Any]
) -> tuple[
    tuple[list[np.ndarray[Any, Any]], np.ndarray[Any, Any], np.ndarray[Any, Any]],
    np.ndarray[Any, Any],
]:
    """A window's documents as ``fit`` takes them: ``(the runs' ids, then a row of padding
    (``padding_row``); the run of each document; where it begins in the run's ids)``, and
    their lengths."""
    sources = [run.ids for run, _, _ in parts]
    sources.append(padding_row(cap, pad_id, sources[0], dtype))
    source = np.repeat(np.arange(len(parts)), [end - j for _, j, end in parts])
    starts = np.concatenate([run.starts[j:end] for run, j, end in parts])
    lengths = np.concatenate([run.lengths[j:end] for run, j, end in parts])
    return (sources, source, starts), lengths


def padding_row(
    cap: int, pad_id: int, ids: np.ndarray[Any, Any], dtype: np.dtype[Any]
) -> np.ndarray[Any, Any]:
    """A row of padding: in the dtype of the documents' ``ids`` if it holds ``pad_id`` (the
    rows are then made in it and converted once), else in the batches' ``dtype``."""
    kind = ids.dtype
    if kind.kind not in "iu" or not np.iinfo(kind).min <= pad_id <= np.iinfo(kind).max:
        kind = dtype
    return np.full(cap, pad_id, dtype=kind)
