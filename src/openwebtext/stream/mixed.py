"""The running stream of a ``Mixture``: one ``Stream`` per part over one pool, in turns.

A mixture runs one ``Stream`` per part, so that every part keeps every guarantee of a corpus
of its own: its seeded order and shuffle, its epochs (each part is endless: a small one is
repeated, each epoch in a new order), its share of every rank, exact resume and resharding.
The parts' streams read through one pool (``engine.open_lanes``: one lane per part, the same
workers), and the order in which they take turns is ``mixing.Interleave``'s (stratified: after
any ``n`` documents a rank has handed out, part ``i`` has handed out within one document of
``w_i * n``; by tokens, within one document's ids of ``w_i * T``), or a seeded draw per position
(``sampling="random"``). Weights change at positions of a schedule, or when ``set_weights`` is
called; both are in the state, and the proportions count from each change.

A part's state is taken before the document it has read ahead (by tokens, every part peeks at
its next document to know its size), so resuming hands that document out again, in its turn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import msgspec
import numpy as np
from msgspec import UNSET

from openwebtext.codec import differing, replace
from openwebtext.engine import Lane, LanePool, open_lanes
from openwebtext.errors import CorpusError, StateError
from openwebtext.index import Corpus
from openwebtext.mixing import Interleave, draw
from openwebtext.options import Options
from openwebtext.stream.mixschema import MixMark, MixRun, MixtureStats, Pending
from openwebtext.stream.mixture import Mixture, part_counted
from openwebtext.stream.schema import Change, DocumentState, MixtureConfig, MixtureState, Replay
from openwebtext.stream.source import WindowAhead, failure
from openwebtext.stream.state import Mark, Stats, check_state, config_of
from openwebtext.stream.stream import EPOCH_END, Stream, pool_options
from openwebtext.tokenizer import Tokenizer

__all__ = ["RUN", "MixedStream"]

#: Documents a run of a mixture (what the packers read) holds at most.
RUN = 256


class _Part:
    """One part of a running mixture: its stream, and the document it has read ahead (or
    ``EPOCH_END``: it stopped at the end of an epoch, the next one not yet read)."""

    __slots__ = ("before", "documents", "head", "name", "seen", "stream")

    def __init__(self, name: str, stream: Stream, epoch_ends: bool) -> None:
        self.name = name
        self.stream = stream
        self.documents = stream.documents(epoch_ends=epoch_ends)
        self.head: Any = None
        self.before: Any = None  # the stream's mark before ``head``
        self.seen = stream.mark().epoch
        """The epoch of the last document read (handed out or ahead), or of the next one at
        an epoch's end: once past the run's last epoch, the part has done its epochs (it goes
        on, repeated, meanwhile). A state knows it from the part's position (a document read
        ahead is read again on resume). It counts the stream's epoch ends, which may lag its
        documents: a best-fit window dealt by a reshard reads its documents of the part's
        next epochs in the rest of the first (``rest.Dealt``), and the epochs they were left
        out of end with none (``ahead`` reads on past them)."""

    def peek(self, stop_at_end: bool = False) -> Any:
        """The part's next document (read ahead once); with ``stop_at_end``, None at the end
        of an epoch (the next epoch not read: a finite run may end there)."""
        if self.head is EPOCH_END:
            if stop_at_end:
                return None
            self.head = None
        while self.head is None:
            self.before = self.stream.mark()
            try:
                self.head = next(self.documents)
            except StopIteration:
                raise CorpusError(f"the mixture's part {self.name!r} has no documents") from None
            if self.head is EPOCH_END:  # (the stream is at its next epoch's start)
                self.seen += 1
                if stop_at_end:
                    return None
                self.head = None
        return self.head

    def ahead(self, last: int | None, leading: bool | None = False) -> Any:
        """The part's next document, read ahead; None at an epoch's end once the run's
        epochs (up to ``last``) are done, the next one not read. Every other epoch end is
        read past, one at a time: an epoch a reshard's dealt window read ahead of the stream
        (``seen``) ends with no document, so that one read on may be at the run's end too."""
        self.stream.leading = leading  # (the mixture's first since a reshard: ``Stream.leading``)
        head = self.peek(stop_at_end=last is not None)
        while head is None and last is not None and self.seen < last:
            self.head = None  # (past this epoch end, to the next document or epoch end)
            head = self.peek(stop_at_end=True)
        self.stream.leading = False
        return head

    def mark(self) -> Mark:
        """The stream's mark after the last document the part handed out (before the one read
        ahead); at an epoch's end, the next one's start: what reaching it counted is in it."""
        return self.stream.mark() if self.head is None or self.head is EPOCH_END else self.before


class MixedStream:
    """The running stream of a ``Mixture``: one ``Stream`` per part over one pool.

    Args:
        mixture: What to read.
        options: How (every part; a part's own ``Mixture.options`` over them). ``epochs``:
            the run ends when every part of positive weight has handed out that many epochs
            (the others go on meanwhile, repeated); None: endless. ``take``: documents in all.
        tokenizer: ``options.tokenizer``, loaded.
        state: A ``state_dict()`` of this mixture, checked here.
    """

    def __init__(
        self,
        mixture: Mixture,
        options: Options,
        tokenizer: Tokenizer | None,
        *,
        state: Any = None,
    ) -> None:
        if mixture.by == "tokens" and tokenizer is None:
            raise ValueError("a mixture by tokens needs the loader's tokenizer")
        self.mixture = mixture
        self.options = options
        self.tokenizer = tokenizer
        config = mixture.config()
        saved = None if state is None else _check(MixtureState.from_json(state), config)
        opened = {name: mixture.part_options(name, options) for name in mixture.names}
        states: dict[str, DocumentState | None] = {}
        corpora: dict[str, Corpus] = {}
        for name in mixture.names:
            corpus, opts = mixture.corpora[name], opened[name]
            part_state = None if saved is None else saved.parts[name]
            if part_state is not None:
                part_state = _part_state(name, part_state, config_of(corpus, opts, tokenizer))
            resharded = part_state is not None and part_state.reshard is not None
            corpora[name] = part_counted(name, corpus, opts, always=resharded)
            states[name] = part_state
        lanes = [
            Lane(corpora[n].units, pool_options(opened[n], tokenizer), corpora[n].storage)
            for n in mixture.names
        ]
        self._pool: LanePool = open_lanes(lanes, pool_options(options, tokenizer))
        streams = _part_streams(mixture, corpora, opened, tokenizer, states, self._pool)
        self.parts = [_Part(name, stream, options.epochs is not None)
                      for name, stream in zip(mixture.names, streams, strict=True)]  # fmt: skip
        if options.max_errors is not None:  # one bound over every part's skips
            for part in self.parts:
                part.stream.policy.others = _skips_of(
                    [p.stream for p in self.parts if p is not part]
                )
        weights = mixture.weights if saved is None else saved.weights
        self.interleave = Interleave(weights, None if saved is None else saved.served)
        self.handed = 0 if saved is None else saved.handed
        self.pending = Pending(() if saved is None else saved.changes)  # (not in the weights)
        # A saved batches state's part of the document its next batch begins in: kept in
        # this stream's marks until it hands out a document (a state taken before then).
        self._next = None if saved is None else saved.next
        # Best fit after a reshard: the old ranks' windows dealt here, handed out first.
        self.replays: list[Replay] = [] if saved is None else list(saved.replays or ())
        self._schedule = {c.at: c.weights for c in mixture.schedule}
        self._stepped = -1  # the position whose schedule step was applied last
        self._last = options.until
        self._taken = 0
        self.failed = ""  # the error the documents ended with (they cannot go on)
        self.part = -1  # the part of the last document handed out
        # After a reshard of concat batches: the part whose share begins with a document cut
        # across the checkpoint goes first (``Stream.lead_cut``), one that led already first;
        # none once the rank handed a document out (its counts start at the reshard): a state
        # of the new rank inside another part's cut document let that part lead on resume.
        streams = [p.stream for p in self.parts]
        self._lead = next((k for k, s in enumerate(streams) if s.lead_cut(may=False)), None)
        self._fresh = not any(s.stats.documents for s in streams)  # (none led: ``ahead``)
        if self._lead is None and not self.replays and self._fresh:
            self._lead = next((k for k, s in enumerate(streams) if s.lead_cut()), None)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """New weights from the next document the mixture chooses on (the proportions count
        from there): recorded as a change at that position, so a resume applies it there."""
        values = self.mixture.weights_of(weights, "set_weights")
        self.pending.set(Change(self.handed, values))

    def _due(self) -> bool:
        """A change of weights applies before the next document."""
        pending = self.pending.change
        stepped = self.handed in self._schedule and self._stepped != self.handed
        return stepped or (pending is not None and pending.at <= self.handed)

    def _apply_due(self) -> None:
        """The schedule's step at this position (once), then every ``set_weights`` made up
        to it."""
        step = self._schedule.get(self.handed)
        if step is not None and self._stepped != self.handed:
            self.interleave.set_weights(step)
            self._stepped = self.handed
        while (change := self.pending.change) is not None and change.at <= self.handed:
            self.interleave.set_weights(change.weights)
            self.pending = self.pending.following()

    def documents(self) -> Generator[Any, None, None]:
        """The mixture's documents in order (``Document.source``: the part's name)."""
        parts, interleave = self.parts, self.interleave
        take = self.options.take
        choose = self._chooser()
        by_documents = self.mixture.by == "documents"
        try:
            while take is None or self._taken < take:
                replaying = bool(self.replays)
                part: int | None
                if replaying:
                    part = self._replay_turn()
                else:
                    if self._due():
                        self._apply_due()
                    part, self._lead = self._lead, None
                    if part is not None:  # (after a reshard: a cut document, first)
                        parts[part].peek()
                    else:
                        part = choose()
                    if part is None:
                        return
                document = parts[part].head
                size = 1 if by_documents else _size(document)
                # Counted where no signal is taken: ``take`` calls nothing, so a Ctrl-C lands
                # at its entry (nothing counted) or after the ``yield``, never in between.
                if not replaying:  # (a dealt window's documents are the old rank's turns)
                    interleave.take(part, size)
                    self.handed += 1
                parts[part].head, self._next, self.part = None, None, part
                self._taken += 1
                yield document
        except BaseException as exc:
            self.failed = failure(exc)
            raise
        finally:
            self.close()

    def next_run(self, handed: Iterator[Any]) -> MixRun:
        """The next of ``handed`` (``documents()``: the caller's, or it would make a cycle) out
        together, ids end to end, with parts: up to the next multiple of ``RUN`` documents the
        rank handed out, so that a run resumed from any state has read as far as the run it
        resumes at each batch (its ``stats`` the same), never across a change of weights."""
        before = self.mark()
        dealt = len(self.replays)  # a run is one dealt window's, or of the rank's own turns
        if not dealt and self._due():  # the run goes on under the new weights: its marks
            self._apply_due()  # after its first document count from them (before it: before)
        settled = self.mark()
        documents, parts, afters, begins = [], [], [], []
        replays: list[tuple[Replay, ...]] | None = [] if dealt else None
        for document in handed:
            documents.append(document.tokens)
            parts.append(self.part)
            begins.append(self.parts[self.part].stream.start)  # (a cut document's: its offset)
            # (its part's stream has not moved since it read the document: the mark after it)
            afters.append(self.parts[self.part].stream.mark())
            if replays is not None:
                replays.append(tuple(self.replays))
                if len(self.replays) < dealt:  # the window's last document
                    break
            if (before.handed + len(documents)) % RUN == 0 or (not dealt and self._due()):
                break  # (runs end at multiples of RUN: a resumed run reads ahead as far)
        if not documents:
            raise StopIteration
        lengths = np.fromiter(map(len, documents), np.int64, len(documents))
        ids = np.concatenate(documents)
        by_tokens = self.mixture.by == "tokens"
        return MixRun(ids, lengths, np.array(parts, np.int32), afters, before, by_tokens, settled,
                      replays, np.array(begins, np.int64))  # fmt: skip

    def _replay_turn(self) -> int:
        """The part of the next document of the first dealt window: the old rank's turns, as
        that rank resumed at the window's start would take them, among the parts with
        documents of the window left (the others' were never its turn again)."""
        replay, parts = self.replays[0], self.parts
        turns = Interleave(replay.weights, replay.served)
        changes = list(replay.changes)
        step = self._schedule.get(replay.handed)
        if step is not None:
            turns.set_weights(step)
        while changes and changes[0].at <= replay.handed:
            turns.set_weights(changes.pop(0).weights)
        tokens = self.mixture.by == "tokens"
        if self.mixture.sampling == "random":
            part = draw(turns.weights, (self.options.seed, replay.rank), replay.handed)
        else:
            sizes = [(_size(p.peek()) if tokens else 1) if n else math.inf
                     for p, n in zip(parts, replay.left, strict=True)]  # fmt: skip
            part = turns.choose(sizes)
        if part < 0 or not replay.left[part]:
            which = "any part its turns choose" if part < 0 else repr(self.mixture.names[part])
            raise StateError(
                f"bad state: documents.replays[0]: the best-fit window dealt from old rank "
                f"{replay.rank} holds no more documents of {which}, its old turn: its counts "
                "are not this run's", field="documents.replays[0]")  # fmt: skip
        head = parts[part].peek()  # (read ahead: its document, handed out next)
        turns.take(part, _size(head) if tokens else 1)
        left = list(replay.left)
        left[part] -= 1
        if sum(left):
            self.replays[0] = replace(replay, handed=replay.handed + 1, weights=turns.weights,
                                      served=tuple(turns.served), left=tuple(left),
                                      changes=tuple(changes))  # fmt: skip
        else:
            self.replays.pop(0)
        return part

    def windows_ahead(self) -> list[WindowAhead]:
        """The dealt best-fit windows not begun, as ``(documents, number, rows handed out,
        packings)`` (``DocumentSource.windows_ahead``)."""
        return [(r.documents, r.number, r.rows, r.packings)
                for r in self.replays if sum(r.left) == r.documents]  # fmt: skip

    def _chooser(self) -> Callable[[], int | None]:
        """The next part to hand a document out (its head read), or None: the run's end."""
        parts, interleave = self.parts, self.interleave
        tokens = self.mixture.by == "tokens"
        random = self.mixture.sampling == "random"
        seed, last = (self.options.seed, self.options.rank), self._last
        held: list[Any] = [None, []]  # the weights, and their parts of positive weight

        def choose() -> int | None:
            weights = interleave.weights
            if weights is not held[0]:  # (a new tuple at each change of weights)
                held[:] = weights, [p for p, w in zip(parts, weights, strict=True) if w > 0]
            live: list[_Part] = held[1]
            first = self._fresh and not self._taken  # (since a reshard: a cut one may lead)
            if tokens:
                for p in live:  # a part at an epoch's end says so before reading on
                    p.ahead(last, None if first else False)
                if last is not None and all(p.seen >= last for p in live):
                    return None  # every part of positive weight handed out the run's epochs
                sizes = [
                    _size(p.peek()) if w > 0 else 0 for p, w in zip(parts, weights, strict=True)
                ]
            if random:
                part = draw(weights, seed, self.handed)
            else:
                part = interleave.choose(sizes if tokens else None)
            chosen = parts[part]
            # (None: at an epoch's end, the run's epochs done; by tokens, every head read before)
            head = chosen.ahead(last, first and not tokens)
            if first and tokens and (led := chosen.stream.lead_first()) is not None:
                head = chosen.head = led  # (by tokens: its cut document leads, chosen first)
            if last is not None and chosen.seen >= last:
                for p in live:  # has every part done the run's epochs? (else read ahead)
                    if p.seen < last:
                        p.ahead(last)
                        if p.seen < last:
                            break
                else:
                    return None
            if head is None:
                chosen.peek()  # on into its next epoch, repeated meanwhile
            return part

        return choose

    def mark(self) -> MixMark:
        """Where the mixture is now, after the last document handed out."""
        it = self.interleave
        marks = tuple(p.mark() for p in self.parts)
        return MixMark(marks, self.handed, it.weights, tuple(it.served), self.pending, self._next,
                       tuple(self.replays), self.mixture.config())  # fmt: skip

    def state(self, mark: MixMark | None = None) -> MixtureState:
        """The state after the last document handed out (or at ``mark``)."""
        m, config = self.mark() if mark is None else mark, self.mixture.config()
        return MixtureState(
            config,
            {p.name: p.stream.state(pm) for p, pm in zip(self.parts, m.of(config), strict=True)},
            m.handed,
            m.weights,
            m.served,
            m.pending.changes(),  # the ones before are in weights and served
            m.next,
            m.replays or UNSET, self._last,
        )  # fmt: skip

    @property
    def stats(self) -> MixtureStats:
        """Counts so far: the parts' summed, and each part's (``parts``); a part's document
        read ahead and not handed out is not counted."""
        each = {p.name: _stats_before(p) for p in self.parts}
        sums = {
            field: sum(getattr(s, field) for s in each.values())
            for field in ("documents", "text_bytes", "units", "skipped_members",
                          "skipped_documents", "replaced_documents", "tokens",
                          "partial_members", "repeated_documents", "dropped_documents",
                          "skipped_files")
        }  # fmt: skip
        skipped = tuple(name for s in each.values() for name in s.skipped)
        epochs = {p.name: (p.stream.mark() if p.head is None else p.before).epoch
                  for p in self.parts}  # (at an epoch's end: of its last document)
        return MixtureStats(**sums, skipped=skipped, parts=each, epochs=epochs)

    def close(self) -> None:
        for part in self.parts:
            part.documents.close()
        if self._pool is not None:
            self._pool.close()


def _stats_before(part: _Part) -> Stats:
    """A part's stats at its state (``_Part.mark``): its document read ahead is not counted,
    nor what reading it counted (skips and their names, a repeat: a run resumed from the state
    counts them again); ``units`` counts reads. At an epoch's end (the state past it) it is."""
    stats = part.stream.stats
    if part.head is None:
        return stats
    counted = part.before.counted()
    if part.head is not EPOCH_END:
        return msgspec.structs.replace(stats, **msgspec.structs.asdict(
            replace(counted, units=stats.units)), skipped=stats.skipped[: part.before.skipped])
    return msgspec.structs.replace(stats, epoch_documents=counted.epoch_documents)


def _skips_of(streams: list[Stream]) -> Callable[[], int]:
    """What ``streams`` skipped so far, summed, when called."""
    return lambda: sum(s.policy.skips(s.mark().counters) for s in streams)


def _size(document: Any) -> int:
    return len(document.tokens)


def _check(state: MixtureState, config: MixtureConfig) -> MixtureState:
    if state.config != config:
        keys = differing(state.config, config)
        differ = [f"{k}: saved {getattr(state.config, k)!r}, now {getattr(config, k)!r}"
                  for k in keys]  # fmt: skip
        raise StateError("the state was saved for another mixture; " + "; ".join(differ),
                         f"config.{keys[0]}", mismatch=True)  # fmt: skip
    return state


def _part_streams(
    mixture: Mixture,
    corpora: dict[str, Corpus],
    opened: dict[str, Options],
    tokenizer: Tokenizer | None,
    states: dict[str, DocumentState | None],
    pool: LanePool,
) -> list[Stream]:
    """Each part's stream on its lane of ``pool`` (closed if one cannot be made): a part's
    state refused where it enters is said as the part's (its field under ``parts.NAME``)."""
    streams = []
    try:
        for k, name in enumerate(mixture.names):
            try:
                streams.append(Stream(corpora[name], opened[name], tokenizer, state=states[name],
                                      pool=pool.lane(k), source=name))  # fmt: skip
            except StateError as exc:
                raise exc.within(f"parts.{name}", f"part {name!r}: ") from None
            except ValueError as exc:  # (options this part cannot be read with)
                raise ValueError(f"part {name!r}: {exc}") from None
    except BaseException:
        pool.close()
        raise
    return streams


def _part_state(name: str, state: DocumentState, config: Any) -> DocumentState:
    try:
        return check_state(state, config)
    except StateError as exc:
        raise exc.within(f"parts.{name}", f"part {name!r}: ") from None
