"""The epochs of a stream: the documents an evened-out rank hands out in one epoch and the
passes over its shard that make them (``EvenEpoch``), the document shuffle of a block, and why
an endless run whose epoch yielded nothing must stop.

The arithmetic is ``plan``'s; this module holds what a stream decides with it: when a rank is
short (skips) and repeats, when it is stuck, and what it tells the user.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from openwebtext.codec import replace
from openwebtext.errors import CorpusError, StateError, in_part
from openwebtext.index import Corpus
from openwebtext.options import Options
from openwebtext.plan import (
    DOCUMENTS,
    EpochShares,
    Share,
    Split,
    advance,
    even_end,
    pass_end,
    permutation,
    plan,
    share_losses,
)
from openwebtext.stream.counters import Counters
from openwebtext.stream.passes import check_pass_end
from openwebtext.stream.schema import DocumentState
from openwebtext.stream.sections import Reshard

__all__ = [
    "EvenEpoch",
    "EvenLosses",
    "block_end",
    "block_permutation",
    "block_size",
    "check_in_run",
    "check_old_ranks",
    "check_position",
    "check_resumed",
    "epoch_shares",
    "even_counts",
    "members_in_run",
    "nothing_read",
    "share_target",
    "short_rest",
    "slots_of",
    "slots_passed",
    "split_of",
]

log = logging.getLogger("openwebtext")


def even_counts(corpus: Corpus, options: Options) -> tuple[int, ...]:
    """Documents of every unit in the stream's split: cutting shares and evening them out
    need them.

    Raises:
        CorpusError: the corpus was not counted (by ``owt index``) for this split.
    """
    counts = corpus.counts
    per_unit = None
    if counts is not None:
        per_unit = counts.per_unit(options.split, options.val_fraction, options.val_seed)
    if per_unit is None:
        raise CorpusError(
            f"sharding (world_size={options.world_size}, even={options.even_mode!r})"
            f" needs the number of documents of every member"
            + (f" in split {options.split!r}" if options.split != "all" else "")
            + ": run `owt index` on the corpus once, or pass even=None",
            path=os.path.dirname(corpus.units[0].path),
        )
    return per_unit


class EvenEpoch:
    """One epoch of an evened-out rank: its ``target``, and where each pass over its shard ends.

    Passes cycle through the rank's shard (``order``) up to where the counts say the target
    is met; if skipped documents leave it short, they go on from there, repeating (said once,
    and counted by the stream). A pass that starts where an epoch without skips would have
    ended repeats: a pure function of the position, so a resumed run counts what an
    uninterrupted one does. A resharded epoch's piece of an old rank's shard is one too, with
    that rank's ``target`` (``stream.rest``).

    Where a repeating pass ends depends on where it began (the documents handed out since are
    fewer than the slots passed): a state inside one says it (``position.pass_end``, checked by
    ``check_pass_end``), and the resumed pass ends there (``ends``), as the run's did.
    """

    def __init__(self, counts: Sequence[int] | None, target: int, *, rank: int, epoch: int,
                 ends: int | None = None) -> None:  # fmt: skip
        assert counts is not None  # (an evened-out share is counted)
        self.counts = counts
        self.target = target
        self.rank = rank
        self.epoch = epoch
        self.expected_end = even_end(counts, self.target)
        self.warned = False
        self.resumed = ends  # the end of the pass a resumed state is inside (its first pass)

    def next_pass(self, start: int, in_block: int, handed: int) -> tuple[int, bool]:
        """Where the pass from plan position ``start`` ends (``in_block`` documents of its first
        block and ``handed`` of the epoch already handed out), and whether it repeats."""
        end = pass_end(self.counts, start, self.target - handed + in_block)
        resumed, self.resumed = self.resumed, None
        if resumed is not None and resumed > start:  # (at its end: the next pass's start)
            end = resumed
        repeat = start >= self.expected_end
        if repeat and not self.warned:
            self.warned = True
            log.warning(
                "rank %d, epoch %d: skips left %d of its %d documents unread; repeating "
                "documents of its shard to keep ranks even (counted in stats.repeated_documents)",
                self.rank, self.epoch, self.target - handed, self.target,
            )  # fmt: skip
        return end, repeat

    def check_progress(self, start: int, end: int, before: int, after: int) -> None:
        """Stop a rank that read no document in a whole pass over its shard.

        Raises:
            CorpusError: the pass ``start..end`` covered the shard and handed nothing out.
        """
        if after == before and end - start >= len(self.counts):
            raise CorpusError(f"rank {self.rank} read no document in a whole pass over its shard:"
                              f" none to repeat for its even share (all skipped, or none): read "
                              "it with even=None")  # fmt: skip


def epoch_shares(
    n_units: int, counts: Sequence[int] | None, options: Options, epoch: int
) -> EpochShares:
    """The epoch's unit order (``plan.plan``, one rank) laid out with the document counts."""
    order = plan(n_units, shuffle=options.shuffle, seed=options.seed, epoch=epoch)
    return EpochShares(order, counts)


def share_target(share: Share, options: Options) -> int | None:
    """The documents a share hands out in its epoch when evened out (None: not evened out):
    all of its interval, which ``plan.share_bounds`` cut to the rule's length."""
    return None if options.even_mode is None else share.documents


class EvenLosses:
    """What evening out the shares costs one share each epoch (``plan.share_losses``):
    ``drop``'s left-out documents on the last share, ``pad``'s repeats on the share that
    reaches into the next; counted when the epoch ends, said once per iterator."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.said = False

    def count(self, shares: EpochShares, epoch: int, counters: Counters) -> Counters:
        """``counters`` with this epoch's losses added (said the first time there are any)."""
        opts = self.options
        if opts.world_size == 1 or opts.even_mode is None:
            return counters
        dropped, repeated = share_losses(shares.total, opts.rank, opts.world_size, opts.even_mode)
        if (dropped or repeated) and not self.said:
            self.said = True
            _warn_losses(opts, epoch, dropped, repeated)
        return replace(
            counters,
            dropped_documents=counters.dropped_documents + dropped,
            repeated_documents=counters.repeated_documents + repeated,
        )


def _warn_losses(options: Options, epoch: int, dropped: int, repeated: int) -> None:
    """Say what evening out leaves out or repeats (counted in ``Stats`` too)."""
    if dropped:
        log.warning(
            "epoch %d: %d document%s left out so that the %d shares are even (even='drop'; "
            "counted in stats.dropped_documents of rank %d)",
            epoch, dropped, "" if dropped == 1 else "s", options.world_size, options.rank,
        )  # fmt: skip
    if repeated:
        log.warning(
            "epoch %d: rank %d reads %d document%s of the next rank's share again so that the "
            "%d shares are even (even='pad'; counted in stats.repeated_documents)",
            epoch, options.rank, repeated, "" if repeated == 1 else "s", options.world_size,
        )  # fmt: skip


def short_rest(options: Options, epoch: int, lap: int, handed: tuple[int, int], target: int,
               whole: bool) -> None:  # fmt: skip
    """An evened-out share of a resharded epoch's rest that skips left short of its ``target``
    goes round its share again, repeating documents (counted), as ``EvenEpoch`` does a rank's
    shard: said at its first lap's end. ``handed``: its documents before and after the lap
    ending, ``whole``: the lap went over all of the share.

    Raises:
        CorpusError: a lap over all of the share after the first handed out nothing.
    """
    before, after = handed
    if lap and whole and after == before:
        raise CorpusError(f"rank {options.rank} read no document in a whole pass over its share "
                          f"of epoch {epoch}'s rest (resharded): none to repeat for its even "
                          "share (all skipped, or none): read it with even=None")  # fmt: skip
    if not lap:
        log.warning(
            "rank %d, epoch %d, resharded: skips left %d of the %d documents of its share of "
            "the rest unread; repeating documents of its share to keep ranks even (counted in "
            "stats.repeated_documents)", options.rank, epoch, target - after, target,
        )  # fmt: skip


def slots_of(share: Share) -> Callable[[int], int] | None:
    """The documents as counted (kept or skipped: their slots) of the unit at each plan
    position of ``share`` (its counts), which its blocks are cut by (``blocks.gather``); None:
    as read (a share not counted: the run needs no counts, and its blocks never change with a
    counts file that appears, whose limits may differ from the run's)."""
    per_position, n = share.counts, len(share.units)
    return None if per_position is None else lambda p: per_position[p % n]


def slots_passed(counts: Sequence[int], block: int, in_block: int) -> int:
    """The slots of a share (``counts``: its documents per plan position) a stream at position
    ``(block, in_block)`` passed: its units before ``block`` and the first ``in_block`` of its
    block (whose kept documents are handed out first); past its units (a pass repeating
    documents after skips), all of them."""
    if block >= len(counts):
        return sum(counts)
    return sum(counts[:block]) + in_block


def block_end(counts: Sequence[int], size: int, block: int) -> int:
    """Where the block that starts at plan position ``block`` of a share ends, cut as the
    stream cuts it: where its units' counted documents reach ``size``."""
    end, slots = block, 0
    while end < len(counts) and slots < size:
        slots += counts[end]
        end += 1
    return end


def split_of(options: Options) -> Split | None:
    """The documents ``options`` keep (None: all of them)."""
    if options.split == "all":
        return None
    return Split(options.split, options.val_fraction, options.val_seed)


def block_size(options: Options) -> int:
    """Documents a shuffle block holds at least."""
    return max(1, options.shuffle_buffer if options.shuffle else 0)


def check_resumed(
    corpus: Corpus, options: Options, state: DocumentState, counts: Sequence[int] | None
) -> None:
    """Check a resumed stream's position and counters against its share of the epoch
    (``check_position``: exactly, when its counters show no skip), where the state enters.
    ``counts``: the documents of every unit, as the stream cuts shares with them (None: one
    share not evened out, which reads no counts: the corpus's are used when it was counted,
    ``owt index``; else only a block's size is checked, when it is read).

    Raises:
        StateError: naming the field that disagrees.
    """
    at, counters = state.position, state.counters
    share = epoch_shares(len(corpus.units), counts, options, at.epoch).share(
        options.rank, options.world_size, options.even_mode
    )
    known = share.counts
    if known is None and corpus.counts is not None:
        per_unit = corpus.counts.per_unit(options.split, options.val_fraction, options.val_seed)
        known = None if per_unit is None else [per_unit[u] for u in share.units]
    if known is None:  # (uncounted: in the share's first block, what its epoch handed out)
        if at.block == 0 and at.in_block != counters.epoch_documents:
            raise StateError(f"bad state: position.in_block: {at.in_block} in the share's first "
                             f"block, whose epoch handed out {counters.epoch_documents}",
                             "position.in_block")  # fmt: skip
        return
    target = share_target(share, options)
    check_position(
        known, block_size(options), target, (at.block, at.in_block, counters.epoch_documents),
        exact=counters.skips == 0, whose=f"rank {options.rank}'s share",
    )  # fmt: skip
    check_pass_end(known, block_size(options), target, state)


def check_old_ranks(
    section: Reshard, counts: Sequence[int], options: Options, *, later: bool = True
) -> None:
    """Check the position of each old rank of a resharded epoch's ``section``, and (``later``)
    of every later epoch's, against its share of that epoch (as a stream resumed on it is), so
    that a state is refused where it enters, not when a later epoch's rest begins.

    Raises:
        StateError: naming the old rank and the epoch whose position disagrees.
    """
    for k, s in enumerate((section, *(section.later if later else ()))):
        path = f"reshard.later[{k - 1}]" if k else "reshard"
        shares = epoch_shares(len(counts), counts, options, s.epoch)
        exact = s.exact or (False,) * s.world_size  # old ranks without skips
        for r, old in enumerate(s.ranks):
            share = shares.share(r, s.world_size, s.even)
            if not old.finished:
                assert share.counts is not None
                target = None if s.even is None else share.documents
                check_position(
                    share.counts, block_size(options), target, (old.block, old.in_block,
                    old.handed), exact=exact[r], whose=f"old rank {r}'s share of epoch {s.epoch}",
                    fields=(f"{path}.ranks[{r}].handed", f"{path}.ranks[{r}]"),
                )  # fmt: skip


def check_in_run(
    state: DocumentState, options: Options, *, whose: str = "the state", cli: bool = False,
    begun: bool = False,
) -> None:  # fmt: skip
    """Refuse a state that lies outside the epochs a run of ``options`` reads: past them it
    would yield nothing, silently (an endless run's state of epoch 2 resumed with
    ``epochs=1``); before them it would read epochs not asked for (a state of epoch 0
    resumed with ``epoch=5``: epochs 0 to 5). A state at the very start of the epoch after
    the last (a finished run's) reads nothing and is taken, unless ``cli`` (``owt stream
    --resume``: there, nothing left to read is refused) or ``begun`` (a batches state whose
    next document is in batches out: it is one to read).

    Raises:
        StateError: naming the state's epoch, the run's and the option that would read it.
    """
    epoch = state.position.epoch
    if epoch < options.epoch:
        fix = f"--epoch {epoch} or less" if cli else f"epoch={epoch} or less (owt stream: " \
            "leave out --epoch)"  # fmt: skip
        raise StateError(f"{whose} is at epoch {epoch}, before the first epoch this run reads "
                         f"({options.epoch}); give {fix} to go on from it", "position.epoch")
    if options.epochs is None:
        return
    last = options.epoch + options.epochs
    at_start = state.position.block == 0 and state.position.in_block == 0
    if epoch < last or (epoch == last and at_start and not (cli or begun)):
        return
    n = epoch - options.epoch + 1
    fix = f"--epochs {n}" if cli else f"epochs={n} (owt stream: --epochs {n}), or epochs=None"
    raise StateError(
        f"{whose}: nothing left to read: the state is at epoch {epoch}, and this run reads "
        f"epochs {options.epoch}..{last - 1}; give {fix} to read epoch {epoch}", "position.epoch"
    )


def block_permutation(
    n: int, options: Options, epoch: int, rank: int, block_start: int
) -> list[int] | None:
    """The hand-out order of a block of ``n`` documents of ``rank``'s shard (None: as read)."""
    if not options.shuffle or options.shuffle_buffer == 0:
        return None
    return permutation(n, options.seed, DOCUMENTS, epoch, rank, block_start)


def _where(corpus: Corpus) -> str:
    """The corpus's file, or the folder (or URL prefix) its files share: what an error about
    the whole corpus names."""
    files = sorted({unit.path for unit in corpus.units})
    if len(files) == 1:
        return files[0]
    common = os.path.commonprefix(files)  # noqa: RUF071 (by character: URLs too, cut at "/")
    return common[: common.rfind("/")] if "/" in common else common


def nothing_read(
    corpus: Corpus,
    options: Options,
    epoch: int,
    counters: Counters,
    skipped_files: int,
    source: str | None = None,
    no_ids: bool = False,
) -> CorpusError:
    """An endless run whose whole epoch yielded nothing would wait forever: say why (and,
    for a mixture's part, which part: a part is read endlessly, whatever the run's epochs).
    ``no_ids``: its documents held no id, and a packer waits for ids (a token file's
    documents may hold none)."""
    why = []
    if options.split != "all":
        why.append(f"split {options.split!r} (val_fraction={options.val_fraction})")
    if options.world_size > 1:
        why.append(f"rank {options.rank} of world_size {options.world_size}")
    skipped = counters.skipped_members + skipped_files
    if skipped:
        why.append(f"{skipped} members or files skipped")
    said = ": an endless run (epochs=None) would wait forever"
    if source is not None:
        said = ": a mixture reads each part endlessly: it would wait forever"
    if source is not None and no_ids:  # (by tokens, or packed: its documents add no id)
        said = (": by tokens it would be chosen for ever, and packed its weight would buy "
                "nothing: leave the part out")
    error = CorpusError(
        f"epoch {epoch} yielded {'documents of no id' if no_ids else 'no document'}"
        + (f" ({', '.join(why)})" if why else "") + said,
        path=_where(corpus),
    )
    return in_part(error, source)  # (its message begins with the part: "part 'web': ")


#: The most epochs ``members_in_run`` counts the shares of.
_COUNTED_EPOCHS = 100


def members_in_run(
    corpus: Corpus, options: Options, state: DocumentState | Mapping[str, Any] | None
) -> int | None:
    """How many members ``options.rank``'s share reads in a run of ``options.epochs`` epochs
    from ``state`` (or from the start), for a progress bar: None without end, in the rest of
    a resharded epoch (its pieces are cut when it starts), or past ``_COUNTED_EPOCHS`` epochs
    (each one's share is counted: a bar's total is not worth a run's wait). Passes that repeat
    documents after skips are not counted."""
    parsed = None if state is None else DocumentState.from_json(state)
    if options.epochs is None or (parsed is not None and parsed.reshard is not None):
        return None
    if options.epochs > _COUNTED_EPOCHS:
        return None
    counts = None
    if options.needs_counts:
        counts = even_counts(corpus, options)
    at_epoch, block = options.epoch, 0
    if parsed is not None:
        at_epoch, block = parsed.position.epoch, parsed.position.block
    total = 0
    for epoch in range(at_epoch, options.epoch + options.epochs):
        shares = epoch_shares(len(corpus.units), counts, options, epoch)
        total += len(shares.share(options.rank, options.world_size, options.even_mode).units)
    return max(0, total - block)


def check_position(
    counts: Sequence[int],
    size: int,
    target: int | None,
    position: tuple[int, int, int],
    *,
    exact: bool,
    whose: str,
    fields: tuple[str, str] = ("counters.epoch_documents", "position"),
) -> None:
    """Check a position ``(block, in_block, epoch documents)`` against the share it is in
    (``counts``: its documents per plan position; ``size``: documents a block holds at least;
    ``target``: its even target, or None), so that no state makes a stream hand out nothing
    without a word, repeat documents or wait for a block that cannot come.

    ``exact``: no document was skipped, so the position is exactly where that many documents
    of the share end (as ``plan.advance`` finds it); else only its bounds are checked.

    Raises:
        StateError: naming the field that disagrees (``fields``: the paths of the count of
            documents handed out and of the position) and ``whose`` share it is.
    """
    block, in_block, handed = position
    handed_at, at = fields
    n, total = len(counts), sum(counts)
    limit = total if target is None else target
    if handed > limit:
        raise StateError(
            f"bad state: counters.epoch_documents={handed} is past the {limit} documents "
            f"{whose} hands out in the epoch", handed_at
        )
    if target is None and (block > n or (block == n and in_block > 0)):
        raise StateError(
            f"bad state: position block={block}, in_block={in_block} lies past the end of "
            f"the {n} members of {whose}", f"{at}.block"
        )
    if n == 0:
        return
    docs, q = 0, block  # the block that starts at ``block``, cut as the stream cuts it
    while q < block + n and docs < size:
        docs += counts[q % n]
        q += 1
    if in_block > docs:
        raise StateError(
            f"bad state: position.in_block={in_block} lies past the end of the block at "
            f"position.block={block} ({docs} documents) of {whose}", f"{at}.in_block"
        )
    if exact:
        from_start = advance(counts, size, (0, 0, 0), handed, target)
        if from_start != ((q, 0) if in_block == docs and docs else (block, in_block)):
            raise StateError(
                f"bad state: position block={block}, in_block={in_block} does not agree with "
                f"counters.epoch_documents={handed}: {handed} documents into {whose} are "
                f"block={from_start[0]}, in_block={from_start[1]}", at
            )
