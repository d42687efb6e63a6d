"""Shuffle blocks: consecutive units gathered until they hold enough documents.

Enough *counted* documents: a block is cut where its units' documents as counted (a unit's
count, or as read: kept, or left out for their content) reach its size, so that a document
skipped for its content (or a unit skipped whole) still counts, and the blocks of a share are
a pure function of its counts, as ``plan.advance`` cuts them (a resharded epoch's rest places
its pieces in them: ``stream.rest``). Without skips they are the blocks of kept documents.

A block is parallel lists over its units' bytes, one entry per kept document,
and no object per document: nothing for the garbage collector to walk, and no
text decoded before the consumer asks for it (``stream`` decodes at hand-out).
The bytes stay in the units' shared-memory slots while the block is handed out
(up to ``HOLD_UNITS`` slots; older units are copied out of theirs). A unit whose
kept documents are a small part of its bytes (a sparse split such as ``val``)
is copied out compactly at once and its slot given back, so that a block never
pins whole members for a few documents.

The rule a ``stream.Mark`` relies on: once a block is yielded, its ``sizes`` and
``counts`` lists (and the permutation the stream makes for it) are never
changed again. A mark keeps references to them, not copies; a new block is a
new ``Block``, never the old one cleared.
"""

from __future__ import annotations

import bisect
import itertools
import os
from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import numpy as np

from openwebtext.engine import Loaded
from openwebtext.errors import CorruptDocument, OWTError, TruncatedMember
from openwebtext.plan import Split, in_validation
from openwebtext.records import Unit
from openwebtext.stream.source import RunParts

__all__ = ["HOLD_UNITS", "Block", "Slots", "gather", "trimmed"]

#: Units whose slots a block may keep while it is handed out (more are copied out).
#: 16 covers the default 4,096-document block of OpenWebText members (~390 documents).
HOLD_UNITS = 16

#: A unit whose kept documents are under 1/SPARSE of its bytes is copied out at once.
SPARSE = 4


class Slots(Protocol):
    """What a block needs of the worker pool: giving a kept unit's slot back."""

    def release(self, ticket: int) -> None: ...


def _free(view: memoryview, ticket: int, slots: Slots) -> None:
    """Let go of a unit's bytes now: its view, and its slot if it has one."""
    view.release()
    if ticket >= 0:
        slots.release(ticket)


class Block:
    """One shuffle block: the documents of consecutive units, not yet decoded.

    Parallel lists, one entry per document: its unit's ``source`` tuple
    ``(view, subset, member, member index, errors or dtype)``, its offset in
    ``view``, its UTF-8 size, its token count (with a tokenizer, else the list
    is empty) and its index in the member (``js``). ``spans`` are the kept
    units' slots: ``(ticket, first document, end document)``; ``firsts`` where each
    unit's documents begin. The names are each kept unit's, all of them, as it gives them
    (``name_parts``: a table unit's or a token unit's ``records.Names`` holds none until
    one is asked for), read by ``name``.

    Args:
        dtype: The token ids' dtype (a stream of token documents), or None (text).
    """

    __slots__ = (
        "counted",
        "counts",
        "dtype",
        "firsts",
        "js",
        "name_parts",
        "offsets",
        "sizes",
        "sources",
        "spans",
    )

    def __init__(self, dtype: Any = None) -> None:
        self.dtype = dtype
        self.sources: list[tuple[memoryview, str, str, int, Any]] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        self.counts: list[int] = []
        self.name_parts: list[Sequence[str]] = []
        self.js: list[int] = []
        self.spans: list[tuple[int, int, int, memoryview]] = []
        self.firsts: list[int] = []
        self.counted = 0
        """Its units' documents as counted: the kept ones and those skipped (``gather``)."""

    def name(self, k: int) -> str:
        """Document ``k``'s name, from its unit's names, all of them (``js[k]``: its index
        there; made when asked: a unit's ``records.Names`` holds none until then, and a run
        of documents never asks)."""
        return self.name_parts[bisect.bisect_right(self.firsts, k) - 1][self.js[k]]

    def __len__(self) -> int:
        return len(self.sizes)

    def add(self, loaded: Loaded, unit: Unit, slots: Slots) -> None:
        """Add the unit's kept documents; their bytes stay in its slot, unless they are a
        small part of it (a sparse split): then they are copied out compactly."""
        data = loaded.data
        view = data if isinstance(data, memoryview) else memoryview(data)
        ticket = loaded.ticket
        offsets, sizes, names, counts = loaded.offsets, loaded.sizes, loaded.names, loaded.counts
        js: Sequence[int] = range(len(offsets))
        if offsets and min(offsets) < 0:  # outside the split, or left out by the worker (counted)
            js = [j for j, offset in enumerate(offsets) if offset >= 0]
            offsets = [offsets[j] for j in js]
            sizes = [sizes[j] for j in js]
            counts = None if counts is None else [counts[j] for j in js]
        if not offsets:
            _free(view, ticket, slots)
            return
        # Bytes of the documents in ``view``: their text, or their ids.
        kept = sum(sizes) if counts is None else sum(counts) * self.dtype.itemsize
        if kept * SPARSE < len(view):
            spans = sizes if counts is None else [c * self.dtype.itemsize for c in counts]
            compact = b"".join([view[o : o + n] for o, n in zip(offsets, spans, strict=True)])
            _free(view, ticket, slots)
            view, ticket = memoryview(compact), -1
            offsets = list(itertools.accumulate(spans, initial=0))[:-1]
        first = len(self.sizes)
        if ticket >= 0:
            self._keep(slots)
            self.spans.append((ticket, first, first + len(offsets), view))
        # The last field: how to decode text, or the dtype of token ids.
        how: Any = "replace" if loaded.replace else "strict"
        if counts is not None:
            how = self.dtype
            self.counts += counts
        source = (view, unit.subset, os.path.basename(unit.member), unit.member_index, how)
        self.firsts.append(first)
        self.offsets += offsets
        self.sizes += sizes
        self.name_parts.append(names)
        self.js += js
        self.sources += [source] * len(offsets)

    def token_run(self, picks: Sequence[int], in_order: bool = False) -> RunParts:
        """The token documents ``picks`` (copied: the slots will be reused), as their ids,
        where each begins in them, their lengths, 0 (``source.TokenRun``'s fields). The ids
        are the units' as they lie (one copy), or ``in_order`` the documents' one after
        another in the order of ``picks`` (one gather)."""
        sources, counts, itemsize = self.sources, self.counts, self.dtype.itemsize
        offsets, counted = np.asarray(self.offsets, np.int64), np.asarray(counts, np.int64)
        ends = offsets + counted * itemsize
        firsts = self.firsts  # a unit's documents are consecutive and share its source tuple
        units, at = [], 0
        unit = np.empty(len(sources), dtype=np.int64)  # each document's unit
        begins = np.empty(len(sources), dtype=np.int64)  # and where it begins in the copy
        for u, (a, b) in enumerate(zip(firsts, [*firsts[1:], len(sources)], strict=True)):
            view, dtype = sources[a][0], sources[a][4]
            low, high = int(offsets[a:b].min()), int(ends[a:b].max())
            units.append(np.frombuffer(view, dtype, (high - low) // itemsize, low))
            unit[a:b], begins[a:b] = u, (offsets[a:b] - low) // itemsize + at
            at += (high - low) // itemsize
        chosen = np.asarray(picks, dtype=np.int64)
        lengths = counted[chosen]
        if not in_order:
            return np.concatenate(units), begins[chosen], lengths, 0
        begins -= np.asarray([0, *itertools.accumulate(len(u) for u in units)])[unit]
        where = zip(unit[chosen].tolist(), begins[chosen].tolist(), lengths.tolist(), strict=True)
        ids = np.concatenate([units[0][:0], *[units[u][b : b + n] for u, b, n in where]])
        return ids, np.cumsum(lengths) - lengths, lengths, 0

    def _keep(self, slots: Slots) -> None:
        """Make room to keep one more unit's slot: past ``HOLD_UNITS``, copy the oldest out."""
        if len(self.spans) < HOLD_UNITS:
            return
        ticket, first, end, view = self.spans.pop(0)
        if end > first:
            rest = self.sources[first][1:]
            copy = memoryview(view.tobytes())
            self.sources[first:end] = [(copy, *rest)] * (end - first)
            view.release()
        slots.release(ticket)

    def release(self, slots: Slots) -> None:
        """Give the kept slots back to the pool (the block's text is then gone)."""
        for ticket, _, _, view in self.spans:  # (the view, not its documents' sources: a unit
            view.release()  # whose adding was interrupted has a span and no sources yet)
            slots.release(ticket)
        self.spans.clear()


def trimmed(loaded: Loaded, trim: tuple[int, int], split: Split | None) -> Loaded:
    """``loaded`` with only documents ``[lo, hi)`` kept (by their index among the member's
    documents of ``split``): a share's part of a unit on its boundary. Errors of documents
    outside it are the other share's; a cut after its last document is no loss to it."""
    lo, hi = trim
    names = loaded.names
    if split is None:
        inside = [lo <= j < hi for j in range(len(names))]
        before_cut = len(names)
    else:
        held_out, before_cut, inside = split.which == "val", 0, []
        for name in names:
            in_split = in_validation(name, split.fraction, split.seed) is held_out
            inside.append(in_split and lo <= before_cut < hi)
            before_cut += in_split
    offsets = [o if keep else -1 for o, keep in zip(loaded.offsets, inside, strict=True)]
    theirs = {name for name, keep in zip(names, inside, strict=True) if not keep}

    def mine(error: OWTError) -> bool:
        if isinstance(error, CorruptDocument):
            return error.document not in theirs
        if isinstance(error, TruncatedMember) and names:  # cut: the documents before it kept
            return before_cut < hi
        return True

    errors = [error for error in loaded.errors if mine(error)]
    return loaded._replace(offsets=offsets, errors=errors)


def _read_count(kept: Loaded, documents: int) -> int:
    """The documents of a unit read (``documents`` of them kept) as a count of it says them:
    those kept and those left out for their content (a unit skipped whole, or the part of one
    after a cut, counts none, as ``count_documents`` counts it under ``skip``)."""
    return documents + sum(1 for e in kept.errors if isinstance(e, CorruptDocument))


def gather(
    loaded: Generator[Loaded, None, None],
    slots: Slots,
    *,
    units: Sequence[Unit],
    start: int,
    size: int,
    dtype: Any = None,
    on_unit: Callable[[Loaded, Loaded], None] | None = None,
    trims: Callable[[int], tuple[int, int] | None] | None = None,
    split: Split | None = None,
    count_at: Callable[[int], int] | None = None,
) -> Generator[tuple[int, int, Block], None, None]:
    """Group units into blocks of at least ``size`` counted documents (``Block.counted``).

    Yields ``(first position, end position, block)``, positions counting units
    in plan order from ``start``. A block's slots are given back once the
    consumer asks for the next block (or leaves).

    Args:
        loaded: The pool's units, in plan order (closed when this generator is).
        slots: The pool, to give slots back to.
        units: The corpus's units (``Loaded.unit`` indexes them).
        start: The plan position of the first unit of ``loaded``.
        size: Documents a block holds at least (the last block may hold fewer).
        dtype: The token ids' dtype, or None (text).
        on_unit: Called with every unit, whole and as kept, before its documents are
            added (to count it and apply the error policy); if it raises, the unit's
            bytes are let go and the error goes on.
        trims: The part ``(lo, hi)`` of the unit at a plan position that is kept
            (``plan.Share.trims``; None: all of it).
        split: The split whose documents ``trims`` count.
        count_at: The documents (of the split, in its trim) of the unit at a plan position as
            counted (``plan.Share.counts``); None: as read (kept, or left out for their
            content: ``_read_count``).
    """
    block = Block(dtype)
    first = position = start
    try:
        for position, unit in enumerate(loaded, start + 1):
            trim = None if trims is None else trims(position - 1)
            kept = unit if trim is None else trimmed(unit, trim, split)
            if on_unit is not None:
                try:
                    on_unit(unit, kept)
                except BaseException:
                    data = unit.data
                    view = data if isinstance(data, memoryview) else memoryview(data)
                    _free(view, unit.ticket, slots)
                    raise
            before = len(block)
            block.add(kept, units[unit.unit], slots)
            at = position - 1
            block.counted += count_at(at) if count_at else _read_count(kept, len(block) - before)
            if block.counted >= size:
                yield first, position, block
                block.release(slots)
                block = Block(dtype)
                first = position
        if len(block) or block.counted:  # (all of its documents skipped: still counted)
            yield first, position, block
    finally:
        block.release(slots)
        loaded.close()
