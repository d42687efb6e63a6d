"""``Counters``: the running counts of a stream, the ``counters`` object of its state;
``PackingCounts``: what packing did to the documents, the ``packed`` object of a batches state;
``PartPacking``: the same for one part of a mixture (``packed_parts``; kept running by
``partpacking``)."""

from __future__ import annotations

from openwebtext.codec import Count, Record

__all__ = ["READ_AGAIN", "BlockSkips", "Counters", "PackingCounts", "PartPacking"]

#: The counts a unit read adds that a block read again on resume adds again (``units`` aside: its
#: reads are counted, the second too).
READ_AGAIN = ("skipped_members", "skipped_documents", "partial_members", "replaced_documents")


class Counters(Record, frozen=True, omit_defaults=True):
    """Running counts of a stream: the ``counters`` of its state, under the same names.

    The one record of counts: the stream keeps one, a ``Mark`` holds one, and
    ``Stats`` is one (plus the names of what was skipped).
    """

    documents: Count = 0
    """Documents handed out."""
    text_bytes: Count = 0
    """UTF-8 bytes of the documents handed out; a token corpus's, which hold no text: the
    bytes of their ids in the file (a mixture's sums both: its parts' say each)."""
    epoch_documents: Count = 0
    """Documents handed out in the current epoch (even sharding stops at its target). A run
    that ended says its last epoch's; a state taken there is at the next epoch's start, so a
    run resumed from it, handing nothing out, says 0."""
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

    def repeated(self, before: int) -> Counters:
        """These counts with the documents of the epoch since ``before`` counted as repeated."""
        return self.plus(repeated_documents=self.epoch_documents - before)

    def handed(self, documents: int, text_bytes: int, tokens: int) -> Counters:
        """These counts after handing out ``documents`` more (of these sizes)."""
        more = {"documents": documents, "epoch_documents": documents}
        return self.plus(**more, text_bytes=text_bytes, tokens=tokens)

    @property
    def skips(self) -> int:
        """What was skipped: members, documents and members cut short."""
        return self.skipped_members + self.skipped_documents + self.partial_members


class BlockSkips(Record, frozen=True, omit_defaults=True):
    """What the units of the block a state is inside counted when they were read (the counts
    of ``READ_AGAIN``), left out of its ``counters``: the block is read again on resume and
    counts them then; until it is, the stream's counts say them (``DocumentState.block_skips``:
    a mixture's part may never read it again)."""

    skipped_members: Count = 0
    skipped_documents: Count = 0
    partial_members: Count = 0
    replaced_documents: Count = 0


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
        return self.plus(padding_ids=padding_ids, cut_documents=cut_documents, pieces=pieces)


class PartPacking(Record, frozen=True, omit_defaults=True):
    """What packing did to one part's documents (a mixture's batches): the ``packed_parts`` of a
    batches state by part name, and the same names in the part's ``stats.parts[name]``. Counted
    as ``PackingCounts``' (the parts' sum to the rank's). Padding belongs to no part: it is
    counted per rank only (``PackingCounts.padding_ids``; a part's ``stats`` say 0)."""

    cut_documents: Count = 0
    """The part's documents cut across rows."""
    pieces: Count = 0
    """The pieces of those documents in the rows handed out."""


