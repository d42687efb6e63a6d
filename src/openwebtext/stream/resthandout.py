"""The hand-out of a rank's share of a resharded epoch's rest (``RestHandOut``, a part of
``stream.Stream``): its pieces (``rest.Rest``), read as their old ranks would; the overruns of
best-fit windows dealt to it (``overrun``); a document cut across a checkpoint of concat
batches going on from its first id not yet a target.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from typing import Any

from openwebtext.codec import replace
from openwebtext.engine import Pool
from openwebtext.errors import StateError
from openwebtext.options import Options
from openwebtext.plan import Share, share_losses
from openwebtext.stream.counters import Counters
from openwebtext.stream.dealing import RAN_INTO_LAP
from openwebtext.stream.epochs import short_rest
from openwebtext.stream.overrun import OverrunPasses
from openwebtext.stream.rest import Piece, Rest
from openwebtext.stream.sections import Reshard
from openwebtext.stream.state import OverrunAt

__all__ = ["RestHandOut", "check_rest_entry", "old_losses"]

log = logging.getLogger("openwebtext")


class RestHandOut:
    """A stream's hand-out of its share of a rest (mixed into ``Stream``, whose position,
    counts and passes it uses)."""

    options: Options
    start: int
    _reshard: Reshard | None
    _rest: Rest | None
    _counters: Counters
    _epoch: int
    _rank: int
    _block: int
    _in_block: int
    _skipped_slots: int
    _tail: int
    _runs: str | None
    _overrun_at: OverrunAt | None
    leading: bool | None
    """A mixture's part: the mixture reads its next document for its first since a reshard
    (``MixedStream``): a cut one leads (``_leads_with``); None: it may, the mixture says once
    it chose (by tokens it reads every part's next document first: ``lead_first``)."""
    _uncut: tuple[Any, int] | None = None
    """The cut document read ahead while ``leading`` was None, whole, and its cut."""

    def _pass(self, pool: Pool, share: Share, start: int, end: int, target: int | None,
              take: int | None, epoch: int, *, slots: int | None = None,
              repeat: bool = False, again: bool = False) -> Generator[Any, None, None]:  # fmt: skip
        raise NotImplementedError  # (``Stream._pass``)

    def _yielded(self) -> int:
        raise NotImplementedError  # (``Stream._yielded``)

    def _rest_documents(self, pool: Pool, take: int | None) -> Generator[Any, None, None]:
        """Hand out this rank's share of a resharded epoch's rest, piece by piece."""
        section, rest = self._reshard, self._rest
        assert section is not None and rest is not None
        if not section.counted:  # the last share counts what evening out cost, and says it
            self._reshard = replace(section, counted=True)
            last = section.share[0] == section.share[1] - 1
            dropped, repeated = old_losses(section, sum(rest.counts)) if last else (0, 0)
            self._counters = self._counters.plus(dropped_documents=rest.dropped_here + dropped,
                                                 repeated_documents=repeated)  # fmt: skip
            _say_losses(self.options, self._epoch, rest.dropped_here + dropped, repeated)
        target, again = rest.length, section.rule is not None  # evened out: round again if short
        due = rest.documents  # (the documents of overruns apart: ``overrun``)
        while self._progress < target or (again and self._own_documents < due):
            lap, at = divmod(self._progress, target)
            moved = (self._progress, self._counters.epoch_documents)  # (a round that moves not:
            before, kept = self._own_documents, (-1, 0, 0)  # (the last piece's rank, slots, out)
            least = {} if lap else rest.least_repeats(at)
            began: dict[int, int] = {}  # (the repeats counted as each piece began)
            for piece in rest.pieces(at):
                began.setdefault(self._progress, self._counters.repeated_documents)
                if piece.overrun is not None:  # (after the window's slots of the old share)
                    yield from self._overrun(pool, piece, kept, take, lap)
                else:
                    handed = self._own_documents
                    self._rank, self._block = piece.rank, piece.block
                    self._in_block = piece.in_block
                    documents = self._pass(pool, piece.share, piece.block, piece.end,
                                           due + self._overrun_out, take, piece.epoch,
                                           slots=piece.documents, repeat=piece.repeat or lap > 0,
                                           again=lap > 0)  # fmt: skip
                    cut = 0 if lap else piece.trim  # (a lap repeating the share: whole)
                    lead = self._leads_with(piece) if cut else False
                    trim = cut - bool(lead)
                    if trim:  # a document cut across the checkpoint goes on from its offset
                        yield from self._cut_first(documents, trim, undecided=lead is None)
                    yield from documents
                    kept = (piece.rank, piece.documents, self._own_documents - handed)
                    _check_least(least.get(self._progress), began,
                                 self._counters.repeated_documents)  # fmt: skip
                done = self._own_documents >= due and (lap > 0 or self._progress >= target)
                if done or (take is not None and self._yielded() >= take):
                    return
            if moved == (self._progress, self._counters.epoch_documents):  # an edited state)
                raise StateError(_STALLED.format(due + self._overrun_out, self._progress, target),
                                 field="reshard.overrun")  # fmt: skip
            if again:  # short (skips): round again, repeating
                short_rest(self.options, self._epoch, lap, (before, self._own_documents), due,
                           not at)  # fmt: skip

    def _overrun(self, pool: Pool, piece: Piece, kept: tuple[int, int, int], take: int | None,
                 lap: int) -> Generator[Any, None, None]:  # fmt: skip
        """Hand out a best-fit window's overrun (``piece``; ``kept``: the old rank, slots and
        documents of the piece before it), then pass the slots it did not fill, so that the
        window ends where its old rank's did; a lap repeating the share passes them only. A
        state inside it is at its end (``Mark.overrun``), and so is the mark after its last
        document (``source.slots_at``: the next window starts there, though the stream passes
        those slots only when it goes on)."""
        start, slots, over = self._progress, piece.documents, piece.overrun
        counts = piece.share.counts
        assert over is not None and counts is not None
        passes = None if lap else OverrunPasses(over, counts, slots, piece.in_block, kept,
                                                self._counters.epoch_documents)  # fmt: skip
        if passes is not None:
            handed = self._counters.epoch_documents
            self._overrun_at = OverrunAt(start + slots, self._overrun_out, handed,
                                         handed + over.repeats)  # fmt: skip
        while passes is not None and (
            step := passes.next(self._counters.epoch_documents, self._progress - start)
        ) is not None:
            block, end, in_block, left, room, repeat = step
            self._rank, self._block, self._in_block = over.rank, block, in_block
            yield from self._pass(pool, piece.share, block, end, self._counters.epoch_documents
                                  + left, take, piece.epoch, slots=room, repeat=repeat)
            if take is not None and self._yielded() >= take:
                return
        if passes is not None and self._reshard is not None:  # (its documents: counted apart)
            got = passes.handed_out(self._counters.epoch_documents)
            self._reshard = replace(self._reshard, overrun=self._reshard.overrun + got)
        self._skipped_slots += start + slots - self._progress  # (the slots it did not fill)
        self._tail, self._overrun_at = 0, None

    def _leads_with(self, piece: Piece) -> bool | None:
        """Whether the cut document ``piece`` begins with leads the rank's stream though its
        share's first slots did not (``Rest.lead`` reads none of them): those before it held
        documents skipped for their content, which no state names, and the rank handed out no
        document before it (a mixture's part: the mixture chose it for its first, ``leading``,
        or a state of its rank says it led). It goes on from the last id that was a target, and
        its section says so (a corpus's: it does not follow, ``Reshard.follows``). None: the
        mixture has not chosen yet (``lead_first``)."""
        section, rest = self._reshard, self._rest
        assert section is not None and rest is not None
        if piece.led or self._counters.documents:
            return False
        if rest.first_leads:  # (a corpus's: its first document leads)
            self._reshard = replace(section, follows=False)
        elif self.leading or section.led:
            self._reshard = replace(section, led=True)
        else:
            return None if self.leading is None else False
        rest.leads = True
        return True

    def lead_first(self) -> Any | None:
        """A mixture's part chosen for the mixture's first document, read ahead while
        ``leading`` was None: that cut document as one that leads (from the last id that was a
        target, and its section says so), or None: it was no such document."""
        if self._uncut is None:
            return None
        (document, trim), section, rest = self._uncut, self._reshard, self._rest
        assert section is not None and rest is not None
        self._reshard, rest.leads = replace(section, led=True), True
        self.start, self._uncut = trim - 1, None
        return document._replace(tokens=document.tokens[trim - 1 :])

    def _cut_first(self, documents: Iterator[Any], trim: int, undecided: bool = False
                   ) -> Iterator[Any]:  # fmt: skip
        """The first of ``documents`` (or a run's) less its first ``trim`` (``start`` says;
        ``undecided``: kept whole meanwhile, ``lead_first``)."""
        for document in documents:
            length = int(document[2][0]) if self._runs else len(document.tokens)
            if trim > length:  # (an edited cut: the document's rest would be lost unsaid)
                raise StateError(f"bad state: reshard: a cut of {trim} ids lies past the end of "
                                 f"the document it is in ({length} ids)", field="reshard")
            if self._runs:  # a run (RunParts)
                ids, starts, lengths, _ = document
                starts[0], lengths[0] = starts[0] + trim, lengths[0] - trim
                yield ids, starts, lengths, trim
            else:
                self.start, self._uncut = trim, (document, trim) if undecided else None
                yield document._replace(tokens=document.tokens[trim:])
                self.start, self._uncut = 0, None
            break

    @property
    def _overrun_out(self) -> int:
        """In a rest: the documents of overruns it handed out (``overrun``)."""
        return 0 if self._reshard is None else self._reshard.overrun

    @property
    def _own_documents(self) -> int:
        """In a rest: the documents it handed out, less those of overruns."""
        return int(self._counters.epoch_documents - self._overrun_out)

    @property
    def _progress(self) -> int:
        """In a rest: the slots of its share passed (``rest``)."""
        return int(self._counters.epoch_documents + self._skipped_slots)


#: A rest whose documents' target is reached before its slots are passed (``_rest_documents``).
_STALLED = ("bad state: reshard.overrun: the rest's {} documents (its own and its overruns') "
            "were handed out with {} of its {} slots passed: its overrun documents are not as "
            "the state's position says (edited?)")


def check_rest_entry(rest: Rest, progress: int, overrun: int, bare: int = 0, skips: int = 0
                     ) -> None:  # fmt: skip
    """Check a state's ``reshard.overrun`` at its entry (``progress``: the slots of ``rest`` it
    passed): the documents of the overruns of the windows dealt before it (``Overrun.repeats``,
    each checked as its overrun is handed out); a state at an overrun's end may have been taken
    inside it (``Mark.overrun``: at least one of its documents out). With no skip counted
    (``skips``) and no overrun, every slot passed handed out a document: none passed bare (its
    position's ``in_block``, ``bare``), and they are the rest's.

    Raises:
        StateError: it says another number, or a position no run without skips reaches.
    """
    if not skips and not overrun and (bare or progress > rest.length):
        raise StateError(f"bad state: position: in_block={bare}: {progress} slots of the rest's "
                         f"{rest.length} passed, {bare} with no document handed out, with no "
                         "skip counted", field="position.in_block")  # fmt: skip
    at, least, most = 0, 0, 0
    for piece in rest.pieces(0):
        if at >= progress:
            break
        at += piece.documents
        if piece.overrun is not None and at <= progress:
            most += piece.overrun.repeats
            least = most - piece.overrun.repeats + 1 if at == progress else most
    if not least <= overrun <= most:
        said = str(most) if least == most else f"{least} to {most}"
        raise StateError(f"bad state: reshard.overrun is {overrun}, not {said}: the documents "
                         "of the overruns of the best-fit windows dealt before its position "
                         f"({progress} slots of its share passed)", field="reshard.overrun")


def _check_least(window: tuple[int, int] | None, began: dict[int, int], repeated: int) -> None:
    """At the end of a best-fit window dealt by a reshard again (``window``: its start and the
    documents of it handed out again, ``Window.least``; None: no such window ends here), from
    the repeats counted when each piece began (``began``).

    Raises:
        StateError: it handed out fewer again: the window ran into the lap repeating its share.
    """
    if window is None or window[0] not in began:
        return
    first, least = window
    if repeated - began[first] < least:
        raise StateError(f"{RAN_INTO_LAP} ({least} of its documents were handed out again, "
                         f"{repeated - began[first]} of its slots here)", field="reshard")


def old_losses(section: Reshard, total: int) -> tuple[int, int]:
    """``(left out, read twice)`` by the old ranks' evened-out shares of an epoch of ``total``
    documents that no rank counted: a rank counts its share's when it finishes the epoch
    (``epochs.EvenLosses``), and the first reshard's last share those of the old ranks that
    had not (a reshard again: if the first level's last share had not counted its own,
    ``Level.counted``, it had not counted these either)."""
    if section.levels and section.levels[0].counted:
        return 0, 0
    lost = [share_losses(total, r, section.world_size, section.even)
            for r, old in enumerate(section.ranks) if not old.finished]  # fmt: skip
    return sum(d for d, _ in lost), sum(r for _, r in lost)


def _say_losses(options: Options, epoch: int, dropped: int, repeated: int) -> None:
    """Say what evening out leaves out of a resharded epoch's rest (``drop``) or repeats in it
    (the old ranks' ``pad``), on the rank that counts it (as ``EvenLosses`` says a plain
    sharded epoch's)."""
    if dropped:
        log.warning(
            "epoch %d, resharded: %d documents of its rest left out so that the shares are "
            "even (even='drop'; counted in stats.dropped_documents of rank %d)",
            epoch, dropped, options.rank,
        )  # fmt: skip
    if repeated:
        log.warning(
            "epoch %d, resharded: %d documents of its rest read twice, as the old ranks' "
            "shares held them to be even (even='pad'; counted in stats.repeated_documents of "
            "rank %d)", epoch, repeated, options.rank,
        )  # fmt: skip
