"""The stream: epochs, the hand-out of each block's documents, error policy, state.

One ``Stream`` per running iterator. It pulls units in plan order from the
worker pool, has them gathered into blocks (``blocks``), permutes each block,
decodes each document to text as it hands it out, and knows at every moment
exactly where it is (``mark``, ``state_dict``). The arithmetic of the order is
in ``plan``, the passes of an evened-out epoch in ``epochs``; the state's
format, counters and marks are in ``state``.

Text is decoded at hand-out, straight from the worker's shared-memory slot, not
when a block is gathered: a consumer that drops each document before taking the
next gets every new ``str`` in memory still hot in its cache. The hand-out loop
(``_pass``) is the consumer's hot path: per document it does one decode and one
tuple, and keeps its position in an attribute as the loop's own target.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import msgspec
import numpy as np

from openwebtext.codec import replace
from openwebtext.engine import Loaded, Pool, PoolOptions, open_pool
from openwebtext.errors import StateError, in_part
from openwebtext.index import Corpus
from openwebtext.options import Options
from openwebtext.plan import Share, block_stop
from openwebtext.records import Document, TokenDocument
from openwebtext.stream import blocks
from openwebtext.stream.counters import READ_AGAIN, BlockSkips, Counters
from openwebtext.stream.counts import ExpectedCounts
from openwebtext.stream.epochs import (
    EvenEpoch,
    EvenLosses,
    block_permutation,
    block_size,
    check_resumed,
    epoch_shares,
    even_counts,
    nothing_read,
    share_target,
    slots_of,
    split_of,
)
from openwebtext.stream.errorpolicy import ErrorPolicy
from openwebtext.stream.rest import Rest, ended
from openwebtext.stream.resthandout import RestHandOut, check_rest_entry
from openwebtext.stream.schema import DocumentState, Position
from openwebtext.stream.source import WindowAhead, failure
from openwebtext.stream.spans import block_part
from openwebtext.stream.state import Mark, OverrunAt, Stats, check_in_block, config_of
from openwebtext.tokenfiles import TOKENS
from openwebtext.tokenizer import Tokenizer

__all__ = ["EPOCH_END", "ErrorPolicy", "Stream", "pool_options"]

#: What ``Stream.documents(epoch_ends=True)`` yields between two epochs.
EPOCH_END: Any = object()

log = logging.getLogger("openwebtext")


def pool_options(options: Options, tokenizer: Tokenizer | None) -> PoolOptions:
    """What the worker pool of a stream with ``options`` is told (``tokenizer``: resolved)."""
    split = split_of(options)
    return PoolOptions(
        workers=options.workers,
        prefetch=options.prefetch,
        timeout=options.timeout,
        retries=0 if options.on_error == "raise" else 1,
        max_member_bytes=options.max_member_bytes,
        max_document_bytes=options.max_document_bytes,
        split=split,
        decode_errors=options.decode_errors,
        hold=blocks.HOLD_UNITS,  # read when called: tests shrink it
        tokenizer=tokenizer,  # resolved once, by the loader
    )


class Stream(RestHandOut):
    """The state and the stages of one running stream of documents.

    ``documents()`` is the generator; it references this object, never the reverse, so
    dropping the last reference to the generator closes it (and its workers) at once.

    Args:
        corpus: What to read.
        options: How to read it.
        tokenizer: ``options.tokenizer``, loaded (None without one).
        state: A ``state_dict()`` of an earlier iterator of the same stream: continue right
            after the last document it handed out.
        as_tuples: Yield the reference API's ``((i, j), (member, name), text)``.
        pool: A lane of a mixture's pool to read with (None: open a pool of its own).
        source: The mixture's part it reads (``Document.source``).
    """

    def __init__(
        self,
        corpus: Corpus,
        options: Options,
        tokenizer: Tokenizer | None,
        *,
        state: DocumentState | None = None,
        as_tuples: bool = False,
        pool: Pool | None = None,
        source: str | None = None,
    ) -> None:
        if (tokenizer is None) != (options.tokenizer is None):
            raise ValueError(f"tokenizer {tokenizer!r} for options.tokenizer={options.tokenizer!r}")
        self.corpus = corpus
        self.options = options
        self.tokenizer = tokenizer
        self._as_tuples = as_tuples
        self.source = source  # the mixture's part this stream reads (``Document.source``)
        self._dtype = None if tokenizer is None else tokenizer.dtype
        self._config = config_of(corpus, options, tokenizer)
        at = state or DocumentState(self._config, Position(options.epoch), Counters())
        position, counters, self._reshard = at.position, at.counters, at.reshard  # checked at entry
        self._passed = at.passed  # the rests handed out to their end (``ended``)
        # Where the stream is: the block being handed out and how far into it.
        self._epoch = position.epoch
        self._block, self._block_end, self._block_len = position.block, position.block, 0
        self._in_block = position.in_block if self._reshard is None else 0
        self._first_in_block = self._in_block  # handed out before this iterator started
        self._finished_pass: int | None = None  # the last epoch's count, once the run ended
        self._block_order: list[int] | None = None
        self._block_sizes: list[int] = []
        self._block_counts: list[int] = []
        self._repeats_from: int | None = None  # the block's first position handed out again
        self._again = False  # (the pass reads units the epoch read: ``_pass``)
        self._pass_end = position.pass_end or None  # (a pass repeating after skips: its end)
        self._skipped_slots, self._tail = position.in_block - self._in_block, 0  # (a rest's: Mark)
        self._overrun_at: OverrunAt | None = None  # (inside an overrun: Mark's)
        self._rank = options.rank  # whose shard is handed out (an old rank's, resharded)
        self._read_before = counters  # (and its skips: those of the units before its own)
        self._unread = at.block_skips  # (its block's: said until it is read again)
        # Inside a block: what its units' reads counted then, which the reads again must count.
        self._read_then = (at.block_skips or BlockSkips()) if self._in_block else None
        # documents, bytes and tokens before the current block
        self._counters = counters if at.block_skips is None else counters.plus(
            **msgspec.structs.asdict(at.block_skips))  # fmt: skip
        self._yielded_before = 0  # by this iterator, for ``take``
        # Files skipped at open are the corpus's: named here, counted by every iterator.
        self.policy = ErrorPolicy(options, corpus.skipped_files, corpus.units, source)
        self._expected: ExpectedCounts | None = None  # when counted: checked as read
        self._losses = EvenLosses(options)  # what evening out costs: counted, said once
        if state is not None and self._reshard is None:  # checked against its share once, here
            check_resumed(corpus, options, state, self._counts_per_unit if options.needs_counts
                          else None)  # fmt: skip
        self._pool: Pool | None = pool  # given: a lane of a mixture's pool (else opened)
        self.start = 0  # where the last document handed out begins in its ids
        self.leading = False  # (``RestHandOut.leading``)
        self.failed = ""  # the error the documents ended with (they cannot go on)
        self._runs: str | None = None  # token documents handed out a block's rest at a time
        # Between blocks, passes and epochs (fields set one at a time, calls between): the mark
        # after the last document handed out, so that an exception a signal's handler raises
        # there (Ctrl-C, a SIGTERM handler's SystemExit) leaves a state that resumes exactly.
        self._steady: Mark | None = None
        self._rest = None if self._reshard is None else Rest(  # (a mixture's part: no lead)
            self._reshard, self._counts_per_unit, options, leads=source is None, part=source
        )  # fmt: skip
        if self._rest is not None and self._reshard is not None:  # (its position, overruns)
            check_rest_entry(self._rest, self._progress, self._reshard.overrun,
                             self._skipped_slots, self._counters.skips)  # fmt: skip

    def mark(self) -> Mark:
        """Where the stream is now, after the last document handed out: cheap enough to take
        before every document (a tuple of references); ``state(mark)`` makes it a state."""
        return self._now() if self._steady is None else self._steady  # (between blocks: where
        # it was after its last document)

    def _now(self) -> Mark:
        return Mark(
            self._epoch, self._block, self._block_end, self._block_len, self._in_block,
            self._first_in_block, self._block_order, self._block_sizes, self._block_counts,
            self._counters, len(self.policy.skipped), self._reshard, self._passed, self._pass_end,
            self._read_before, self._repeats_from, self._skipped_slots, self._tail,
            self._overrun_at, self._config,
        )  # fmt: skip

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def windows_ahead(self) -> list[WindowAhead]:
        """The best-fit windows a resharded share still hands out first (``Rest``)."""
        return [] if self._rest is None else self._rest.windows_ahead(self._progress)

    def lead_cut(self, may: bool = True) -> bool:
        """Whether the next document leads the rank's stream (``Rest.lead``; ``may``: let it)."""
        if self._rest is None or self._progress:
            return False
        self._reshard = self._rest.lead(may)
        return self._reshard.led

    @property
    def stats(self) -> Stats:
        """Counts so far (including those carried over from a resumed state; after a failure,
        what was read until it, as the error counts them)."""
        m = self._now() if self.failed else self.mark()
        counted = m.counted()
        if self._finished_pass is not None:  # the state is at the next epoch's start; not Stats
            counted = replace(counted, epoch_documents=self._finished_pass)
        return Stats(
            **msgspec.structs.asdict(counted),
            skipped=tuple(self.policy.skipped[: m.skipped]),
            skipped_files=self.policy.files,
        )

    def state(self, mark: Mark | None = None) -> DocumentState:
        """The state after the last document handed out (or at ``mark``), as its record:
        ``state_dict`` is its JSON, to resume with ``Loader.iter(state=…)``."""
        until = self.options.until if self.source is None else msgspec.UNSET  # (a part's: none)
        return (self.mark() if mark is None else mark).state(self._config, until)

    def documents(
        self, runs: str | None = None, *, epoch_ends: bool = False
    ) -> Generator[Any, None, None]:
        """The documents in order (``runs``: "units" or "in order", see ``Block.token_run``;
        ``epoch_ends``: ``EPOCH_END`` between two epochs, before the next is read, the mark
        at its start)."""
        self._runs = runs if self._dtype is not None else None
        opts = self.options
        take = opts.take
        if take == 0 or not self.corpus.units:
            return
        last = opts.until
        files = self.corpus.skipped_files
        self.policy.check(self._counters, files[-1] if files else None)
        if opts.needs_counts and self.corpus.counts is not None:
            in_split = None if opts.split == "all" else self._counts_per_unit
            self._expected = ExpectedCounts(self.corpus.counts.documents, in_split, opts.split)
        pool = self._pool = self._pool or open_pool(
            self.corpus.units, pool_options(opts, self.tokenizer), self.corpus.storage
        )
        self._steady = self.mark()  # (until the first block's documents go out)
        try:
            while last is None or self._epoch < last:
                whole = not (self._reshard or self._block or self._in_block)  # from its start
                ids_before = self._counters.tokens
                if self._reshard is not None:
                    yield from self._rest_documents(pool, take)
                else:
                    yield from self._epoch_documents(pool, take)
                if take is not None and self._yielded() >= take:
                    self._steady = None
                    return
                # What reads ids (a packer's runs; a mixture's part: its turns by tokens or its
                # documents packed) waits for ever on an epoch of none where no epoch holds one.
                waits = self._runs is not None or self.source is not None
                no_ids = waits and self._dtype is not None and self._counters.tokens == ids_before
                no_ids = no_ids and bool(self._counters.epoch_documents)  # (else: no document)
                no_ids = no_ids and _never_ids(self.corpus, opts)
                if last is None and whole and (no_ids or not self._counters.epoch_documents):
                    raise nothing_read(self.corpus, opts, self._epoch, self._counters,
                                       self.policy.files, self.source, no_ids)  # fmt: skip
                self._epoch += 1
                self._block = self._block_end = self._in_block = self._first_in_block = 0
                self._block_len, self._rank, self._pass_end = 0, opts.rank, None
                self._passed, self._rest = ended(self._rest, self._passed)
                self._reshard = None if self._rest is None else self._rest.section
                if last is not None and self._epoch >= last:  # Stats reports the pass it ended
                    self._finished_pass = self._counters.epoch_documents
                self._counters = replace(self._counters, epoch_documents=0)
                self._read_before = self._counters  # (the epoch's last block: never read again)
                self._skipped_slots = self._tail = 0
                self._steady = None
                self._steady = self.mark()  # (the next epoch's start, until its documents go out)
                if epoch_ends and (last is None or self._epoch < last):
                    yield EPOCH_END
        except BaseException as exc:
            self.failed = failure(in_part(exc, self.source))
            raise
        finally:
            pool.close()

    def _yielded(self) -> int:
        return int(self._yielded_before + self._in_block - self._first_in_block)

    def _epoch_documents(self, pool: Pool, take: int | None) -> Generator[Any, None, None]:
        """Hand out the rest of the current epoch from the current block on (or evened-out passes
        to its target); at its end, count what evening the shares out left out or read twice."""
        opts, epoch = self.options, self._epoch
        counts = self._counts_per_unit if opts.needs_counts else None
        shares = epoch_shares(len(self.corpus.units), counts, opts, epoch)
        share = shares.share(opts.rank, opts.world_size, opts.even_mode)
        stop, even = share_target(share, opts), None
        if stop is None:
            yield from self._pass(pool, share, self._block, len(share.units), None, take, epoch)
        else:
            even = EvenEpoch(share.counts, stop, rank=opts.rank, epoch=epoch, ends=self._pass_end)
        while even is not None and self._counters.epoch_documents < even.target:
            start, before = self._block, self._counters.epoch_documents
            end, repeat = even.next_pass(start, self._in_block, before)
            self._pass_end = end if repeat else None  # (the state says it: ``Mark.pass_end``)
            yield from self._pass(pool, share, start, end, even.target, take, epoch, repeat=repeat,
                                  again=repeat)  # fmt: skip
            if take is not None and self._yielded() >= take:
                return
            even.check_progress(start, end, before, self._counters.epoch_documents)
            self._block, self._in_block = end, 0
        if take is not None and self._yielded() >= take:
            return
        self._counters = self._losses.count(shares, epoch, self._counters)

    @functools.cached_property
    def _counts_per_unit(self) -> tuple[int, ...]:
        return even_counts(self.corpus, self.options)

    def _pass(self, pool: Pool, share: Share, start: int, end: int, target: int | None,
              take: int | None, epoch: int, *, slots: int | None = None,
              repeat: bool = False, again: bool = False) -> Generator[Any, None, None]:  # fmt: skip
        """Hand out the documents of plan positions ``start..end`` of ``share`` (wrapping around
        its units), in ``epoch``'s order (a rest's piece: ``spans.block_part``). ``repeat``: its
        documents are counted as repeats; ``again``: its units were read in the epoch's first
        lap over the share, which counted their skips (``ErrorPolicy.unit_read``)."""
        self._again = again
        feed = _wrapped(share.units, start, end)
        units = len(share.units)  # not ``n``: the loop below rebinds it, and both closures ran late
        if self._unread is not None:  # a state's block, read again: its skips counted so
            self._counters = replace(self._counters, **{k: getattr(self._read_before, k)
                                                        for k in READ_AGAIN})  # fmt: skip
            self._unread = None
        skip, self._read_before = self._in_block, self._counters
        opts = self.options
        gathered = blocks.gather(
            pool.run(feed),
            pool,
            units=self.corpus.units,
            start=start,
            size=block_size(opts),
            dtype=self._dtype,
            on_unit=self._count_unit,
            trims=(lambda p: share.trims.get(p % units)) if share.trims else None,
            split=split_of(opts),
            count_at=slots_of(share),
        )
        new, source = tuple.__new__, self.source
        try:
            for block_start, block_end, block in gathered:
                block_len = len(block.sizes)  # not ``n``: ``feed`` reads it as it runs
                check_in_block(skip, block.counted if slots else block_len, not slots)  # (first)
                if self._read_then is not None:  # a state's block, read again: as it read then
                    _check_read_again(self._read_then, self._counters, self._read_before)
                    self._read_then = None
                last, out = block_part(block.counted, block_len, skip, slots)
                self._tail = last - max(skip, out)  # (its skipped slots: ``source.slots_at``)
                self._repeats_from = 0 if repeat else None
                self._block, self._block_end = block_start, block_end
                self._block_sizes, self._block_counts = sizes, counts = block.sizes, block.counts
                self._block_order = order_ = block_permutation(
                    block_len, opts, epoch, self._rank, block_start
                )
                self._in_block = self._first_in_block = begin = skip
                handed = self._counters.epoch_documents
                stop = block_stop(out, skip, target_left=_left(target, handed))
                self._block_len = out if slots is not None else stop  # (target: never read again)
                self._steady = None  # (its documents go out: the position is this block's)
                stop = block_stop(stop, skip, take_left=_left(take, self._yielded_before))
                # The position is set between a document made and its ``yield`` (no signal is
                # taken between the two): exact whenever the consumer looks, a Ctrl-C included.
                picks = range(skip, stop) if order_ is None else order_[skip:stop]
                skip = 0
                sources, offsets, js = block.sources, block.offsets, block.js
                if self._runs and stop > self._in_block:  # the block's rest at once
                    run, self._in_block = block.token_run(picks, self._runs == "in order"), stop
                    yield run  # (the position as if its documents went out one by one)
                elif self._dtype is not None:  # token ids: copied, since the slot will be reused
                    frombuffer, name = np.frombuffer, block.name  # (runs: no names)
                    for at, k in enumerate(picks, self._in_block + 1):
                        view, subset, member, i, dtype = sources[k]
                        ids = frombuffer(view, dtype, counts[k], offsets[k]).copy()
                        made = new(TokenDocument, (ids, subset, member, name(k), i, js[k], source))
                        self._in_block = at
                        yield made
                else:
                    name = block.name
                    for at, k in enumerate(picks, self._in_block + 1):
                        view, subset, member, i, errors = sources[k]
                        text = str(view[offsets[k] : offsets[k] + sizes[k]], "utf-8", errors)
                        text_made = (((i, js[k]), (member, name(k)), text) if self._as_tuples
                                     else new(Document, (text, subset, member, name(k), i, js[k],
                                                         source)))  # fmt: skip
                        self._in_block = at
                        yield text_made
                self._steady = self.mark()  # (until the next block's documents go out)
                self._counters = self._steady.counted()
                if self._in_block >= out:  # past its last: the slots skipped after it too
                    self._skipped_slots, self._tail = self._skipped_slots + self._tail, 0
                self._yielded_before += self._in_block - self._first_in_block
                self._first_in_block = self._in_block
                if stop < out:  # take or the target stopped us mid-block: its skips are
                    return  # read again on resume (and ``_read_before``'s, those before it)
                self._read_before = self._counters
                if slots is not None and (slots := slots - (last - begin)) <= 0:
                    return  # (a piece: all of its slots passed)
                if take is not None and self._yielded_before >= take:
                    return  # (at a block's end: the next one is not read, nor its skips counted)
        finally:
            gathered.close()

    def _count_unit(self, loaded: Loaded, kept: Loaded) -> None:
        self._counters = self.policy.unit_read(loaded, kept, self._counters, self._expected,
                                               self._again)  # fmt: skip


def _never_ids(corpus: Corpus, options: Options) -> bool:
    """Whether a rank's epoch of documents of no id means every epoch of it holds none: the
    corpus holds no id (token units of no byte), or each epoch reads the same documents (in
    corpus order, or of one unit). Else another epoch's share may hold some (shuffled)."""
    units = corpus.units
    empty = all(unit.kind == TOKENS and unit.size == 0 for unit in units)
    return empty or not options.shuffle or len(units) == 1


def _wrapped(order: Sequence[int], start: int, end: int) -> Iterator[int]:
    """The units at plan positions ``start..end`` of ``order``, wrapping around it. A function
    of its own: a generator expression in ``_pass`` read ``n`` lazily, after the loop had
    rebound it to a block's size, and fed the wrong units once positions passed it (the
    trims' lambda read the same ``n``)."""
    n = len(order)
    return (order[p % n] for p in range(start, end))


def _left(bound: int | None, used: int) -> int | None:
    """What a bound (the even target, ``take``) still allows (None: no bound)."""
    return None if bound is None else bound - used


def _check_read_again(then: BlockSkips, now: Counters, before: Counters) -> None:
    """Check that the units of a state's block, read again, counted the skips they counted
    when the state was taken (its ``block_skips``): a member that failed then and reads now
    (a file being synced, a transient error), or the other way round, makes the block hold
    other documents, and its position in it would hand out some twice and lose others.

    Raises:
        StateError: the block's reads differ (what was counted then, and now).
    """
    read = {k: getattr(now, k) - getattr(before, k) for k in READ_AGAIN}
    said = msgspec.structs.asdict(then)
    if read != said:
        differ = "; ".join(f"{k} {said[k]} then, {read[k]} now" for k in READ_AGAIN
                           if said[k] != read[k])  # fmt: skip
        raise StateError(
            "the state's block reads otherwise now than when the state was taken ("
            + differ
            + "): a member failed then or fails now (a file changed, or a passing error), so "
            "its position in the block would hand out other documents; resume from a state "
            "taken at another block, or start again",
            "block_skips",
        )
