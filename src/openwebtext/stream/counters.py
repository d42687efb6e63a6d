"""``Counters``: the running counts of a stream, the ``counters`` object of its state;
``PackingCounts``: what packing did to the documents, the ``packed`` object of a batches state;
``PartPacking``: the same for one part of a mixture (``packed_parts``), kept running as an array
of parts (``add_parts``, ``named_parts``, ``indexed_parts``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from openwebtext import codec
from openwebtext.codec import Count, Record

__all__ = [
    "NO_PARTS",
    "Counters",
    "PackingCounts",
    "PartPacking",
    "add_parts",
    "indexed_parts",
    "named_parts",
]


class Counters(Record, frozen=True, omit_defaults=True):
    """Running counts of a stream: the ``counters`` of its state, under the same names.

    The one record of counts: the stream keeps one, a ``Mark`` holds one, and
    ``Stats`` is one (plus the names of what was skipped).
    """

    documents: Count = 0
    """Documents handed out."""
    text_bytes: Count = 0
    """UTF-8 bytes of the documents handed out."""
    epoch_documents: Count = 0
    """Documents handed out in the current epoch (even sharding stops at its target)."""
    units: Count = 0
    """Units (members) read."""
    skipped_members: Count = 0
    skipped_documents: Count = 0
    replaced_documents: Count = 0
    """Documents whose invalid UTF-8 became U+FFFD (``decode_errors="replace"``)."""
    tokens: Count = 0
    """Token ids handed out, end-of-text ids included (with a ``tokenizer``)."""
    partial_members: Count = 0
    """Members cut short whose documents before the cut were delivered (named in ``skipped``)."""
    repeated_documents: Count = 0
    """Documents handed out again to keep ranks even (under ``pad``: a pass past the share's
    end after skips, or the first documents of the next share), counted when each ends."""
    dropped_documents: Count = 0
    """Documents of an epoch left out under ``drop`` so that the shares stay even (counted
    by the last share when its epoch ends, or starts in a resharded epoch)."""

    def unit_read(self, replaced: int) -> Counters:
        """These counts after reading one more unit (``replaced``: its documents decoded with
        ``errors="replace"``)."""
        return codec.replace(
            self, units=self.units + 1, replaced_documents=self.replaced_documents + replaced
        )

    def repeated(self, before: int) -> Counters:
        """These counts with the documents of the epoch since ``before`` counted as repeated."""
        repeated = self.repeated_documents + self.epoch_documents - before
        return codec.replace(self, repeated_documents=repeated)

    def handed(self, documents: int, text_bytes: int, tokens: int) -> Counters:
        """These counts after handing out ``documents`` more (of these sizes)."""
        return codec.replace(
            self,
            documents=self.documents + documents,
            text_bytes=self.text_bytes + text_bytes,
            epoch_documents=self.epoch_documents + documents,
            tokens=self.tokens + tokens,
        )

    @property
    def skips(self) -> int:
        """What was skipped: members, documents and members cut short."""
        return self.skipped_members + self.skipped_documents + self.partial_members


class PackingCounts(Record, frozen=True):
    """What packing did to the documents in the batches handed out (``Loader.batches``): the
    ``packed`` of a batches state, and the same names in its ``stats``. Per rank; a resharded
    rank's start at 0."""

    padding_ids: Count = 0
    """Padding ids in the rows (best fit; concat never pads)."""
    cut_documents: Count = 0
    """Documents cut across rows: best fit's longer than a row (counted with their first
    piece); concat's cut by a row's start (counted at their first cut)."""
    pieces: Count = 0
    """The pieces of cut documents in the rows handed out."""

    def add(self, padding_ids: int, cut_documents: int, pieces: int) -> PackingCounts:
        """These counts, and more."""
        return PackingCounts(
            self.padding_ids + padding_ids,
            self.cut_documents + cut_documents,
            self.pieces + pieces,
        )


class PartPacking(Record, frozen=True, omit_defaults=True):
    """What packing did to one part's documents (a mixture's batches): the ``packed_parts`` of a
    batches state by part name, and the same names in the part's ``stats.parts[name]``. Counted
    as ``PackingCounts``' (the parts' sum to the rank's). Padding belongs to no part: it is
    counted per rank only (``PackingCounts.padding_ids``; a part's ``stats`` say 0)."""

    cut_documents: Count = 0
    """The part's documents cut across rows."""
    pieces: Count = 0
    """The pieces of those documents in the rows handed out."""


#: Per-part counts kept running: row 0 cut documents, row 1 pieces, a column per part (by its
#: index in the mixture's parts; columns past the last part counted are 0).
NO_PARTS: np.ndarray[Any, Any] = np.zeros((2, 0), dtype=np.int64)


def add_parts(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The sum of two arrays of per-part counts (``NO_PARTS``' shape), of any numbers of parts."""
    if a.shape[1] < b.shape[1]:
        a, b = b, a
    out = a.copy()
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
