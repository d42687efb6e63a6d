"""The stream: decode, shuffle blocks, epochs, error policy, counts and resumable state.

One ``Stream`` per running iterator. It pulls units in plan order from the
worker pool, gathers them into blocks, permutes each block, decodes each
document to text as it hands it out, and knows at every moment exactly where
it is (``state_dict``).

Text is decoded at hand-out, straight from the worker's shared-memory slot, not
when a block is gathered: a block then holds no object per document (nothing
for the garbage collector to walk), and a consumer that drops each document
before taking the next gets every new ``str`` in memory still hot in its cache.
The slots of a block's units are kept until the block is handed out (the pool's
``hold``); past ``HOLD_UNITS`` units, the oldest are copied out of their slots.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .corpus import Corpus
from .counts import ExpectedCounts
from .errors import CorpusError, OWTError, StateError, TooManyErrors, TruncatedMember
from .options import Options
from .plan import DOCUMENTS, Split, epoch_target, permutation, plan
from .state import STATE_FORMAT, check_state, stream_config
from .tokenizer import load_tokenizer
from .workers import Loaded, Pool, PoolOptions, open_pool

__all__ = ["Document", "Mark", "Stats", "Stream", "TokenDocument"]

log = logging.getLogger("openwebtext")

#: Units whose slots a block may keep while it is handed out (more are copied out).
#: 16 covers the default 4,096-document block of OpenWebText members (~390 documents).
HOLD_UNITS = 16


class Document(NamedTuple):
    """One document and where it came from."""

    text: str
    subset: str
    """The file it came from, without suffix (``urlsf_subset00``)."""
    member: str
    """The inner member's file name (``urlsf_subset00-1_data.xz``)."""
    name: str
    """The document's name inside the member (``0000000-….txt``)."""
    member_index: int
    """Index of the member in its file (``i`` of the reference API)."""
    document_index: int
    """Index of the document in its member (``j`` of the reference API)."""


class TokenDocument(NamedTuple):
    """One document as token ids (a loader with ``tokenizer``), and where it came from."""

    tokens: np.ndarray[Any, np.dtype[np.unsignedinteger[Any]]]
    """Its ids, ending with the tokenizer's end-of-text id, as the tokenizer's dtype."""
    subset: str
    member: str
    name: str
    member_index: int
    document_index: int


def _free(view: memoryview, ticket: int, pool: Pool) -> None:
    """Let go of a unit's bytes now: its view, and its slot if it has one."""
    view.release()
    if ticket >= 0:
        pool.release(ticket)


class Mark(NamedTuple):
    """Where a stream was (``Stream.mark``): what ``state_dict`` needs, as references."""

    epoch: int
    block: int
    block_end: int
    block_len: int
    in_block: int
    first_in_block: int
    order: list[int] | None
    sizes: list[int]
    counts: list[int]
    delivered_before: int
    bytes_before: int
    tokens_before: int
    epoch_before: int
    units: int
    skipped_members: int
    skipped_documents: int
    replaced: int
    skipped: int
    partial: int
    repeated: int


def _handed(order: list[int] | None, first: int, end: int, values: list[int]) -> int:
    """The sum of a block's per-document ``values`` over its hand-out positions first..end."""
    if not values:
        return 0
    if order is None:
        return sum(values[first:end])
    return sum([values[k] for k in order[first:end]])


@dataclass(frozen=True)
class Stats:
    """What an iterator has delivered and left out so far."""

    documents: int
    text_bytes: int
    units: int
    skipped_members: int
    skipped_documents: int
    replaced_documents: int
    skipped: tuple[str, ...]
    """Names of what was skipped (``file[member]`` or ``file[member] (document …)``)."""
    tokens: int = 0
    """Token ids handed out, end-of-text ids included (with a ``tokenizer``)."""
    skipped_files: int = 0
    """Files left out when the corpus was opened under ``skip`` (named in ``skipped``)."""
    partial_members: int = 0
    """Members cut short whose documents before the cut were delivered (named in ``skipped``)."""
    repeated_documents: int = 0
    """Documents handed out again to keep ranks even after skips left this rank short
    (counted when each such pass ends)."""


class Stream:
    """The state and the stages of one running stream of documents.

    ``documents()`` is the generator; it references this object, never the
    reverse, so dropping the last reference to the generator closes it (and
    its workers) at once, without waiting for the cyclic garbage collector.

    Args:
        corpus: The corpus to read.
        options: How to read it.
        state: A ``state_dict()`` of an earlier iterator of the same stream:
            continue right after the last document it handed out.
        as_tuples: Yield the reference API's ``((i, j), (member, name), text)``.
    """

    def __init__(
        self,
        corpus: Corpus,
        options: Options,
        *,
        state: dict[str, Any] | None = None,
        as_tuples: bool = False,
    ) -> None:
        self.corpus = corpus
        self.options = options
        self._as_tuples = as_tuples
        self._dtype: np.dtype[Any] | None = None
        tokenizer = None
        if options.tokenizer is not None:
            loaded_tokenizer = load_tokenizer(options.tokenizer)
            self._dtype = loaded_tokenizer.dtype
            tokenizer = loaded_tokenizer.fingerprint  # the vocabulary, wherever its file is
        self._config = stream_config(
            corpus.fingerprint(), len(corpus.units), options, tokenizer=tokenizer
        )
        if state is not None:
            check_state(state, self._config)
            position = state["position"]
            counters = state.get("counters", {})
        else:
            position = {"epoch": options.epoch, "block": 0, "in_block": 0}
            counters = {}
        # Where the stream is: the block being handed out and how far into it.
        self._epoch: int = position["epoch"]
        self._block: int = position["block"]
        self._block_end: int = position["block"]
        self._block_len = 0
        self._in_block: int = position["in_block"]
        self._first_in_block = self._in_block  # handed out before this iterator started
        self._block_order: list[int] | None = None
        self._block_sizes: list[int] = []
        self._block_counts: list[int] = []
        # Running counts; "before" ones exclude the current block.
        self._delivered_before: int = counters.get("documents", 0)
        self._bytes_before: int = counters.get("text_bytes", 0)
        self._tokens_before: int = counters.get("tokens", 0)
        self._epoch_before: int = counters.get("epoch_documents", 0)
        self._yielded_before = 0
        self._units: int = counters.get("units", 0)
        self._skipped_members: int = counters.get("skipped_members", 0)
        self._skipped_documents: int = counters.get("skipped_documents", 0)
        self._replaced: int = counters.get("replaced_documents", 0)
        self._partial: int = counters.get("partial_members", 0)
        self._repeated: int = counters.get("repeated_documents", 0)
        # Files skipped at open are the corpus's: named here, counted by every iterator.
        self._skipped: list[str] = [str(error) for error in corpus.skipped_files]
        self._expected: ExpectedCounts | None = None  # when evened out: checked as read
        self._pool: Pool | None = None

    # -- what has been handed out ---------------------------------------------

    def mark(self) -> Mark:
        """Where the stream is now, after the last document handed out.

        Cheap enough to take before every document (a tuple of references);
        ``state_dict(mark)`` turns it into a state later.
        """
        return Mark(
            self._epoch,
            self._block,
            self._block_end,
            self._block_len,
            self._in_block,
            self._first_in_block,
            self._block_order,
            self._block_sizes,
            self._block_counts,
            self._delivered_before,
            self._bytes_before,
            self._tokens_before,
            self._epoch_before,
            self._units,
            self._skipped_members,
            self._skipped_documents,
            self._replaced,
            len(self._skipped),
            self._partial,
            self._repeated,
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    @property
    def stats(self) -> Stats:
        """Counts so far (including those carried over from a resumed state)."""
        return self._stats(self.mark())

    def _stats(self, m: Mark) -> Stats:
        return Stats(
            m.delivered_before + m.in_block - m.first_in_block,
            m.bytes_before + _handed(m.order, m.first_in_block, m.in_block, m.sizes),
            m.units,
            m.skipped_members,
            m.skipped_documents,
            m.replaced,
            tuple(self._skipped[: m.skipped]),
            m.tokens_before + _handed(m.order, m.first_in_block, m.in_block, m.counts),
            len(self.corpus.skipped_files),
            m.partial,
            m.repeated,
        )

    def state_dict(self, mark: Mark | None = None) -> dict[str, Any]:
        """The state after the last document handed out (or at ``mark``): resume with
        ``Loader.iter(state=…)``."""
        m = self.mark() if mark is None else mark
        stats = self._stats(m)
        if m.block_len and m.in_block >= m.block_len:
            position = {"epoch": m.epoch, "block": m.block_end, "in_block": 0}
        else:
            position = {"epoch": m.epoch, "block": m.block, "in_block": m.in_block}
        return {
            "format": STATE_FORMAT,
            "config": dict(self._config),
            "position": position,
            "counters": {
                "documents": stats.documents,
                "text_bytes": stats.text_bytes,
                "epoch_documents": m.epoch_before + m.in_block - m.first_in_block,
                "units": stats.units,
                "skipped_members": stats.skipped_members,
                "skipped_documents": stats.skipped_documents,
                "replaced_documents": stats.replaced_documents,
                "tokens": stats.tokens,
                "partial_members": stats.partial_members,
                "repeated_documents": stats.repeated_documents,
            },
        }

    # -- the pipeline -----------------------------------------------------------

    def _new_pool(self) -> Pool:
        opts = self.options
        split = None if opts.split == "all" else Split(opts.split, opts.val_fraction, opts.val_seed)
        pool_options = PoolOptions(
            workers=opts.workers,
            prefetch=opts.prefetch,
            timeout=opts.timeout,
            retries=0 if opts.on_error == "raise" else 1,
            max_member_bytes=opts.max_member_bytes,
            max_document_bytes=opts.max_document_bytes,
            split=split,
            decode_errors=opts.decode_errors,
            hold=HOLD_UNITS,
            tokenizer=opts.tokenizer,
        )
        return open_pool(self.corpus.units, pool_options)

    def _target(self, epoch: int) -> int | None:
        """Documents this rank yields in ``epoch`` when ranks are evened out, else None."""
        opts = self.options
        rule = opts.even_mode
        if rule is None:
            return None
        counts = None
        if self.corpus.counts is not None:
            counts = self.corpus.counts.per_unit(opts.split, opts.val_fraction, opts.val_seed)
        if counts is None:
            raise CorpusError(
                f"even sharding (world_size={opts.world_size}, even_rule={rule!r}) needs the "
                f"number of documents of every member"
                + (f" in split {opts.split!r}" if opts.split != "all" else "")
                + ": run `owt index` on the corpus once, or pass even=False",
                path=os.path.dirname(self.corpus.units[0].path),
            )
        return epoch_target(
            counts,
            shuffle=opts.shuffle,
            seed=opts.seed,
            epoch=epoch,
            world_size=opts.world_size,
            rule=rule,
        )

    def documents(self) -> Generator[Any, None, None]:
        """The documents, in order; closes the workers when done or closed."""
        opts = self.options
        take = opts.take
        if take == 0 or not self.corpus.units:
            return
        last = None if opts.epochs is None else opts.epoch + opts.epochs
        self._check_skips(self.corpus.skipped_files[-1] if self.corpus.skipped_files else None)
        if opts.even_mode is not None and self.corpus.counts is not None:
            in_split = None if opts.split == "all" else self._unit_counts()
            self._expected = ExpectedCounts(self.corpus.counts.documents, in_split, opts.split)
        pool = self._pool = self._new_pool()
        try:
            while last is None or self._epoch < last:
                yield from self._epoch_documents(pool, take)
                if take is not None and self._yielded() >= take:
                    return
                if last is None and self._epoch_before == 0:
                    raise self._nothing_read()
                self._epoch += 1
                self._block = self._block_end = self._in_block = self._first_in_block = 0
                self._block_len = 0
                self._epoch_before = 0
        finally:
            pool.close()

    def _nothing_read(self) -> CorpusError:
        """An endless run whose whole epoch yielded nothing would wait forever: say why."""
        opts = self.options
        why = []
        if opts.split != "all":
            why.append(f"split {opts.split!r} (val_fraction={opts.val_fraction})")
        if opts.world_size > 1:
            why.append(f"rank {opts.rank} of world_size {opts.world_size}")
        skipped = self._skipped_members + len(self.corpus.skipped_files)
        if skipped:
            why.append(f"{skipped} members or files skipped")
        return CorpusError(
            f"epoch {self._epoch} yielded no document"
            + (f" ({', '.join(why)})" if why else "")
            + ": an endless run (epochs=None) would wait forever",
            path=os.path.dirname(self.corpus.units[0].path),
        )

    def _yielded(self) -> int:
        yielded: int = self._yielded_before + self._in_block - self._first_in_block
        return yielded

    def _epoch_documents(
        self, pool: Pool, take: int | None
    ) -> Generator[Any, None, None]:
        """Hand out the rest of the current epoch, from the current block on."""
        opts = self.options
        order = plan(
            len(self.corpus.units),
            shuffle=opts.shuffle,
            seed=opts.seed,
            epoch=self._epoch,
            rank=opts.rank,
            world_size=opts.world_size,
        )
        target = self._target(self._epoch)
        if target is None:
            yield from self._pass(pool, order, self._block, len(order), None, take)
            return
        if target > 0 and not order:
            raise CorpusError(
                f"rank {opts.rank} has no member to read: world_size {opts.world_size} is more "
                f"than the {len(self.corpus.units)} members; use even_rule='drop' or fewer ranks"
            )
        counts = self._unit_counts()
        # Evened out: cycle through this rank's shard (positions past its end wrap
        # around) up to where the counts say the target is met; if skipped
        # documents leave it short, go on from there, repeating (said and counted).
        passes = 0
        while self._epoch_before < target:
            start = self._block
            need = target - self._epoch_before + self._in_block
            end = start
            # A pass never crosses the end of the shard: its blocks must be cut where an
            # uninterrupted run cuts them, wherever a resumed run starts.
            shard_end = (start // len(order) + 1) * len(order)
            while need > 0 and end < shard_end:
                need -= counts[order[end % len(order)]]
                end += 1
            before = self._epoch_before
            if passes == 1:
                self._warn_short(target)
            yield from self._pass(pool, order, start, end, target, take)
            if passes:
                self._repeated += self._epoch_before - before
            passes += 1
            if take is not None and self._yielded() >= take:
                return
            if self._epoch_before == before and end - start >= len(order):
                raise CorpusError(
                    f"rank {opts.rank} read no document in a whole pass over its shard"
                )
            self._block, self._in_block = end, 0

    def _warn_short(self, target: int) -> None:
        opts = self.options
        log.warning(
            "rank %d, epoch %d: skips left %d of its %d documents unread; repeating documents "
            "of its shard to keep ranks even (counted in stats.repeated_documents)",
            opts.rank, self._epoch, target - self._epoch_before, target,
        )  # fmt: skip

    def _unit_counts(self) -> tuple[int, ...]:
        opts = self.options
        counts = self.corpus.counts
        assert counts is not None  # _target checked
        per_unit = counts.per_unit(opts.split, opts.val_fraction, opts.val_seed)
        assert per_unit is not None
        return per_unit

    def _pass(
        self,
        pool: Pool,
        order: list[int],
        start: int,
        end: int,
        target: int | None,
        take: int | None,
    ) -> Generator[Any, None, None]:
        """Hand out the documents of plan positions ``start..end`` (wrapping around ``order``)."""
        feed = (order[p % len(order)] for p in range(start, end))
        skip = self._in_block
        blocks = self._blocks(pool, pool.run(feed), start)
        new = tuple.__new__
        try:
            for block_start, block_end, block in blocks:
                n = len(block.sizes)
                if skip > n:  # only a resumed state's first block has skip > 0
                    raise StateError(
                        f"bad state: position in_block={skip} lies past the end of its block "
                        f"of {n} documents"
                    )
                self._block, self._block_end = block_start, block_end
                self._block_len = n
                self._block_sizes = sizes = block.sizes
                self._block_counts = counts = block.counts
                self._block_order = order_ = self._permutation(n, block_start)
                self._in_block = self._first_in_block = skip
                stop = n
                if target is not None:
                    stop = min(stop, skip + target - self._epoch_before)
                if take is not None:
                    stop = min(stop, skip + take - self._yielded_before)
                # The loop target is the attribute itself: the position is exact
                # whenever the consumer looks, at no cost per document.
                picks = range(skip, stop) if order_ is None else order_[skip:stop]
                skip = 0
                sources, offsets, names, js = block.sources, block.offsets, block.names, block.js
                if self._dtype is not None:  # token ids: copied, since the slot will be reused
                    frombuffer = np.frombuffer
                    for self._in_block, k in enumerate(picks, self._in_block + 1):  # noqa: B020
                        view, subset, member, i, dtype = sources[k]
                        ids = frombuffer(view, dtype, counts[k], offsets[k]).copy()
                        yield new(TokenDocument, (ids, subset, member, names[k], i, js[k]))
                else:
                    for self._in_block, k in enumerate(picks, self._in_block + 1):  # noqa: B020
                        view, subset, member, i, errors = sources[k]
                        offset = offsets[k]
                        text = str(view[offset : offset + sizes[k]], "utf-8", errors)
                        if self._as_tuples:
                            yield ((i, js[k]), (member, names[k]), text)
                        else:
                            yield new(Document, (text, subset, member, names[k], i, js[k]))
                handed = self._in_block - self._first_in_block
                self._delivered_before += handed
                self._bytes_before += _handed(order_, self._first_in_block, self._in_block, sizes)
                self._tokens_before += _handed(
                    order_, self._first_in_block, self._in_block, counts
                )
                self._epoch_before += handed
                self._yielded_before += handed
                self._first_in_block = self._in_block
                if stop < n:
                    return  # take or the target stopped us mid-block
        finally:
            blocks.close()

    def _permutation(self, n: int, block_start: int) -> list[int] | None:
        opts = self.options
        if not opts.shuffle or opts.shuffle_buffer == 0:
            return None
        return permutation(n, opts.seed, DOCUMENTS, self._epoch, opts.rank, block_start)

    def _blocks(
        self, pool: Pool, loaded: Generator[Loaded, None, None], start: int
    ) -> Generator[tuple[int, int, _Block], None, None]:
        """Group units into blocks of >= shuffle_buffer documents.

        Yields ``(first position, end position, block)``, positions counting units
        in plan order from ``start``. A block's units are released to the pool
        once the consumer has asked for the next block (or left).
        """
        opts = self.options
        size = max(1, opts.shuffle_buffer if opts.shuffle else 0)
        block = _Block()
        first = position = start
        try:
            for position, unit in enumerate(loaded, start + 1):
                self._add(unit, block, pool)
                if len(block.sizes) >= size:
                    yield first, position, block
                    block.release(pool)
                    block = _Block()
                    first = position
            if block.sizes:
                yield first, position, block
        finally:
            block.release(pool)
            loaded.close()

    def _add(self, loaded: Loaded, block: _Block, pool: Pool) -> None:
        """Add the unit's kept documents to ``block``; their bytes stay in its slot, unless
        they are a small part of it (a sparse split): then they are copied out compactly."""
        unit = self.corpus.units[loaded.unit]
        self._units += 1
        data = loaded.data
        view = data if isinstance(data, memoryview) else memoryview(data)
        ticket = loaded.ticket
        try:
            cut = False
            for error in loaded.errors:
                if isinstance(error, TruncatedMember) and loaded.names:
                    cut = True
                    self._cut(error)
                else:
                    self._error(error, member_level=not loaded.names)
            if self._expected is not None and not cut and (loaded.names or not loaded.errors):
                self._expected.check(self.corpus.units[loaded.unit], loaded)
        except BaseException:
            _free(view, ticket, pool)
            raise
        offsets, sizes, names, counts = loaded.offsets, loaded.sizes, loaded.names, loaded.counts
        js: Sequence[int] = range(len(offsets))
        if offsets and min(offsets) < 0:  # outside the split, or left out by the worker (counted)
            js = [j for j, offset in enumerate(offsets) if offset >= 0]
            offsets = [offsets[j] for j in js]
            sizes = [sizes[j] for j in js]
            names = [names[j] for j in js]
            counts = None if counts is None else [counts[j] for j in js]
        if not offsets:
            _free(view, ticket, pool)
            return
        self._replaced += loaded.replace
        # Bytes of each document in ``view``: its text, or its ids.
        itemsize = 1 if self._dtype is None else self._dtype.itemsize
        spans = sizes if counts is None else [c * itemsize for c in counts]
        if sum(spans) * 4 < len(view):
            compact = b"".join([view[o : o + n] for o, n in zip(offsets, spans, strict=True)])
            _free(view, ticket, pool)
            view, ticket = memoryview(compact), -1
            offsets = list(itertools.accumulate(spans, initial=0))[:-1]
        first = len(block.sizes)
        if ticket >= 0:
            block.keep(pool)
            block.spans.append((ticket, first, first + len(offsets)))
        # The last field: how to decode text, or the dtype of token ids.
        how: Any = "replace" if loaded.replace else "strict"
        if counts is not None:
            how = self._dtype
            block.counts += counts
        source = (view, unit.subset, os.path.basename(unit.member), unit.member_index, how)
        block.offsets += offsets
        block.sizes += sizes
        block.names += names
        block.js += js
        block.sources += [source] * len(offsets)

    def _cut(self, error: TruncatedMember) -> None:
        """A member cut short: its documents before the cut are kept, under skip or warn."""
        if self.options.on_error == "raise":
            raise error
        self._partial += 1
        self._note(error)
        self._check_skips(error)

    def _note(self, error: OWTError) -> None:
        if len(self._skipped) < 10_000:
            self._skipped.append(str(error))
        if self.options.on_error == "warn":
            log.warning("skipped: %s", error)

    def _check_skips(self, error: OWTError | None) -> None:
        """More skips (members, documents, files, members cut short) than ``max_errors`` end
        the run."""
        opts = self.options
        skips = self._skipped_members + self._skipped_documents + self._partial
        skips += len(self.corpus.skipped_files)
        if error is not None and opts.max_errors is not None and skips > opts.max_errors:
            raise TooManyErrors(
                f"{skips} skipped, more than max_errors={opts.max_errors}; last: {error}"
            ) from error

    def _error(self, error: OWTError, *, member_level: bool) -> None:
        opts = self.options
        if opts.on_error == "raise":
            raise error  # its __cause__ says where the worker raised it
        if member_level:
            self._skipped_members += 1
        else:
            self._skipped_documents += 1
        self._note(error)
        self._check_skips(error)


class _Block:
    """One shuffle block: the documents of consecutive units, not yet decoded.

    Parallel lists, one entry per document (no object per document, so nothing
    for the garbage collector to walk): its unit's ``source`` tuple ``(view,
    subset, member, member index, errors or dtype)``, its offset in ``view``, its
    UTF-8 size, its token count (with a tokenizer), its name and its index in
    the member. ``spans`` are the kept units' slots:
    ``(ticket, first document, end document)``.
    """

    __slots__ = ("counts", "js", "names", "offsets", "sizes", "sources", "spans")

    def __init__(self) -> None:
        self.sources: list[tuple[memoryview, str, str, int, Any]] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        self.counts: list[int] = []  # token ids per document (with a tokenizer), else empty
        self.names: list[str] = []
        self.js: list[int] = []
        self.spans: list[tuple[int, int, int]] = []

    def keep(self, pool: Pool) -> None:
        """Make room to keep one more unit's slot: past ``HOLD_UNITS``, copy the oldest out."""
        if len(self.spans) < HOLD_UNITS:
            return
        ticket, first, end = self.spans.pop(0)
        if end > first:
            view, *rest = self.sources[first]
            copy = memoryview(view.tobytes())
            self.sources[first:end] = [(copy, *rest)] * (end - first)
            view.release()
        pool.release(ticket)

    def release(self, pool: Pool) -> None:
        """Give the kept slots back to the pool (the block's text is then gone)."""
        for ticket, first, end in self.spans:
            if end > first:
                self.sources[first][0].release()
            pool.release(ticket)
        self.spans.clear()
