"""Packing figures and labels per part of a mixture: each part's cut documents and pieces
(``counters.PartPacking``), kept running as an array with a column per part while batches are
made, written into a batches state (``packed_parts``) and its ``stats.parts``; a best-fit
window's documents of each part (``window_parts``) and their slots (``window_slots``, what a
reshard deals) and the part of
every id of its rows (``PackedBatch.sources``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import msgspec
import numpy as np

from openwebtext import codec
from openwebtext.errors import StateError
from openwebtext.stream.counters import PackingCounts, PartPacking
from openwebtext.stream.mixschema import MixMark, MixRun, MixtureStats
from openwebtext.stream.schema import BatchesState, DocumentState, MixtureState
from openwebtext.stream.sections import Across
from openwebtext.stream.source import AnyMark, Run, TokenRun, slots_at
from openwebtext.stream.state import Mark, Stats

__all__ = [
    "NO_PARTS",
    "add_parts",
    "check_window",
    "document_parts",
    "id_parts",
    "indexed_parts",
    "named_parts",
    "packed_stats",
    "parts_of_state",
    "parts_to_state",
    "window_fields",
    "window_part_counts",
    "window_part_slots",
    "window_repeats",
]


#: Per-part counts kept running: row 0 cut documents, row 1 pieces, a column per part (by its
#: index in the mixture's parts; columns past the last part counted are 0).
NO_PARTS: np.ndarray[Any, Any] = np.zeros((2, 0), dtype=np.int64)


def add_parts(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The sum of two arrays of per-part counts (``NO_PARTS``' shape), of any numbers of parts."""
    if a.shape[1] < b.shape[1]:
        a, b = b, a
    out: np.ndarray[Any, Any] = a.copy()
    out[:, : b.shape[1]] += b
    return out


def named_parts(counts: np.ndarray[Any, Any], names: Sequence[str]) -> dict[str, PartPacking]:
    """Per-part counts by the parts' ``names``, the parts with none left out."""
    return {
        names[k]: PartPacking(cut, pieces)
        for k, (cut, pieces) in enumerate(counts.T.tolist())
        if cut or pieces
    }


def indexed_parts(
    counts: Mapping[str, PartPacking], names: Sequence[str]
) -> np.ndarray[Any, Any]:
    """``named_parts``' inverse: the counts of a state's ``packed_parts`` by part index."""
    out = np.zeros((2, len(names)), dtype=np.int64)
    for k, name in enumerate(names):
        if name in counts:
            out[:, k] = counts[name].cut_documents, counts[name].pieces
    return out


def parts_of_state(start: BatchesState | None) -> np.ndarray[Any, Any]:
    """The per-part counts a batches state says (``counters.NO_PARTS``' shape; none: none)."""
    if start is None or not isinstance(start.documents, MixtureState):
        return NO_PARTS
    saved = start.packed_parts if isinstance(start.packed_parts, dict) else {}
    return indexed_parts(saved, start.documents.config.parts)


def parts_to_state(
    documents: DocumentState | MixtureState, counts: np.ndarray[Any, Any]
) -> dict[str, PartPacking] | msgspec.UnsetType:
    """A batches state's ``packed_parts``: a mixture's per-part counts by name (absent when
    none: a corpus's, or nothing cut yet)."""
    if not isinstance(documents, MixtureState):
        return msgspec.UNSET
    return named_parts(counts, documents.config.parts) or msgspec.UNSET


def packed_stats(stats: Stats, counts: PackingCounts, parts: np.ndarray[Any, Any]) -> Stats:
    """``stats`` with what packing did (``Stats.packed``); a mixture's also in each part's
    ``stats.parts[name]``: its cut documents and pieces (padding belongs to no part: a part
    says 0, the rank's ``padding_ids`` count it)."""
    out = stats.packed(counts)
    if not isinstance(out, MixtureStats):
        return out
    names = list(out.parts)
    each = dict(out.parts)
    for k, (cut, pieces) in enumerate(parts.T.tolist()):
        if k < len(names) and (cut or pieces):
            each[names[k]] = codec.replace(each[names[k]], cut_documents=cut, pieces=pieces)
    return codec.replace(out, parts=each)


def window_part_counts(
    pieces: list[tuple[Run, int, int]] | None, documents: MixtureState
) -> tuple[int, ...]:
    """A mixture's window's documents of each part."""
    counts = np.zeros(len(documents.config.parts), np.int64)
    for run, j, end in pieces or ():
        counts += np.bincount(cast(MixRun, run).parts[j:end], minlength=len(counts))
    return tuple(int(c) for c in counts)


def window_part_slots(
    pieces: list[tuple[Run, int, int]] | None, before: AnyMark, counts: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[Across, ...]]:
    """A mixture's window's document slots of each part's share (``counts``: its documents of
    each part; ``before``: the mixture's mark at its start): from the part's mark there to its
    mark after its last document in the window (``source.slots_at``), the documents of it
    skipped among them held, as a reshard deals the window of the part's share
    (``rest.Rest``); and for each part the epoch ends the window crosses and its slots of the
    share of the last epoch it reaches (``Across``). A window crossing a part's epoch end holds
    all the slots of its share left in the epoch before (and all of an epoch between), which the
    part's marks do not count (skipped ones may follow its last document there, or be all it
    holds there): its slots are then its documents, and where it ends says the rest
    (``FitWindow.across``)."""
    out, crossing = list(counts), [Across()] * len(counts)
    if not isinstance(before, MixMark):
        return tuple(out), tuple(crossing)
    last: dict[int, Mark] = {}  # each part's mark after its last document in the window
    for run, j, end in pieces or ():
        if isinstance(run, MixRun):
            for k in range(j, end):
                last[int(run.parts[k])] = run.part_after(k)
    for part, after in last.items():
        start = before.parts[part]
        if after.epoch != start.epoch:  # (counted from its next epoch's start)
            crossing[part] = Across(after.epoch - start.epoch, slots_at(after))
        else:
            out[part] = max(out[part], slots_at(after) - slots_at(start))
    return tuple(out), tuple(crossing)


def window_fields(
    pieces: list[tuple[Run, int, int]] | None, before: AnyMark, documents: MixtureState
) -> dict[str, tuple[int, ...] | tuple[Across, ...]]:
    """A mixture's best-fit state's window fields, rows of it out: ``window_parts``, and its
    ``window_slots`` where skips lie among a part's documents in it, its ``window_next`` where
    it crosses a part's epoch end."""
    counts = window_part_counts(pieces, documents)
    slots, crossing = window_part_slots(pieces, before, counts)
    return ({"window_parts": counts} | ({"window_slots": slots} if slots != counts else {})
            | ({"window_next": crossing} if any(a.ends for a in crossing) else {}))  # fmt: skip


def document_parts(parts: list[tuple[Run, int, int]]) -> np.ndarray[Any, Any] | None:
    """A mixture's: each of a window's documents' part (beside ``_documents``' lengths); None
    for a corpus."""
    runs = [(run.parts, j, end) for run, j, end in parts if isinstance(run, MixRun)]
    return np.concatenate([p[j:end] for p, j, end in runs]) if runs else None


def id_parts(parts: list[tuple[Run, int, int]], cap: int) -> list[np.ndarray[Any, Any]] | None:
    """A mixture's: each run's ids' parts (beside ``_documents``' sources), then padding's
    (-1); None for a corpus."""
    runs = [run for run, _, _ in parts if isinstance(run, MixRun)]
    if not runs:
        return None
    labels = [np.repeat(run.parts.astype(np.int16), run.lengths) for run in runs]
    return [*labels, np.full(cap, -1, np.int16)]


def window_repeats(parts: list[tuple[Run, int, int]] | None) -> int:
    """A corpus's window's documents handed out again (a mixture's: 0, its parts say theirs)."""
    return sum(end - first for run, first, end in parts or ()
               if isinstance(run, TokenRun) and run.after.repeats_from is not None)  # fmt: skip


def check_window(start: BatchesState | None, parts: list[tuple[Run, int, int]] | None,
                 mark: AnyMark) -> None:  # fmt: skip
    """Check a best-fit state's fields that say what a reshard deals of the window it is inside
    (nothing else reads them) against that window read again (its ``parts``, ``mark`` at its
    start): a mixture's ``window_parts``, ``window_slots`` and ``window_next`` (absent: its
    documents', none), a corpus's ``window_repeats`` (when said: a window dealt by a reshard
    whose ``repeats`` were edited holds other documents). ``StateError`` naming them."""
    if start is None:
        return
    again = start.window_repeats
    if isinstance(again, int) and again != (held := window_repeats(parts)):
        raise StateError(f"bad batches state: window_repeats: {again}, but its window holds "
                         f"{held} documents handed out again", field="window_repeats")
    said = start.window_parts
    if isinstance(said, tuple) and isinstance(start.documents, MixtureState):
        found = window_part_counts(parts, start.documents)
        if found != said:
            raise StateError(f"bad batches state: window_parts: {list(said)}, but its window "
                             f"holds {list(found)} documents of each part", field="window_parts")
        slots, crossing = window_part_slots(parts, mark, found)
        if tuple(start.window_slots or said) != slots:  # (absent: its documents')
            raise StateError(f"bad batches state: window_slots: {list(start.window_slots or ())}, "
                             "but "
                             f"its window's documents of each part lie in {list(slots)} slots",
                             field="window_slots")  # fmt: skip
        if tuple(start.window_next or (Across(),) * len(said)) != crossing:
            found_next = [msgspec.to_builtins(a) for a in crossing]
            raise StateError("bad batches state: window_next: its window crosses "
                             f"{found_next} (each part's epoch ends, and its slots of the last "
                             "epoch it reaches)", field="window_next")  # fmt: skip
