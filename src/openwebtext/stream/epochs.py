"""The epochs of a stream: the documents an evened-out rank hands out in one epoch and the
passes over its shard that make them (``EvenEpoch``), the document shuffle of a block, and why
an endless run whose epoch yielded nothing must stop.

The arithmetic is ``plan``'s; this module holds what a stream decides with it: when a rank is
short (skips) and repeats, when it is stuck, and what it tells the user.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from openwebtext.errors import CorpusError
from openwebtext.index import Corpus
from openwebtext.options import Options
from openwebtext.plan import (
    DOCUMENTS,
    EpochShares,
    Share,
    even_end,
    pass_end,
    permutation,
    plan,
    share_losses,
)
from openwebtext.stream.state import Counters

__all__ = [
    "EvenEpoch",
    "block_permutation",
    "epoch_shares",
    "even_counts",
    "members_in_run",
    "nothing_read",
    "share_counts",
    "share_target",
    "warn_losses",
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
            + ": run `owt index` on the corpus once, or pass even=False",
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
    """

    def __init__(self, counts: Sequence[int], target: int, *, rank: int, epoch: int) -> None:
        self.counts = counts
        self.target = target
        self.rank = rank
        self.epoch = epoch
        self.expected_end = even_end(counts, self.target)
        self.warned = False

    def next_pass(self, start: int, in_block: int, handed: int) -> tuple[int, bool]:
        """Where the pass from plan position ``start`` ends (``in_block`` documents of its first
        block and ``handed`` of the epoch already handed out), and whether it repeats."""
        end = pass_end(self.counts, start, self.target - handed + in_block)
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
            raise CorpusError(f"rank {self.rank} read no document in a whole pass over its shard")


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


def share_counts(shares: EpochShares, options: Options) -> tuple[int, int]:
    """``(left out, read twice)``: what evening out costs ``options.rank``'s share
    (``plan.share_losses``); nothing for one share, or without even sharding."""
    if options.world_size == 1 or options.even_mode is None:
        return 0, 0
    return share_losses(shares.total, options.rank, options.world_size, options.even_mode)


def warn_losses(options: Options, epoch: int, dropped: int, repeated: int) -> None:
    """Say once what evening out leaves out or repeats (counted in ``Stats`` too)."""
    if dropped:
        log.warning(
            "epoch %d: %d documents left out so that the %d shares are even (even_rule='drop'; "
            "counted in stats.dropped_documents of rank %d)",
            epoch, dropped, options.world_size, options.rank,
        )  # fmt: skip
    if repeated:
        log.warning(
            "epoch %d: rank %d reads %d documents of the next rank's share again so that the "
            "%d shares are even (even_rule='pad'; counted in stats.repeated_documents)",
            epoch, options.rank, repeated, options.world_size,
        )  # fmt: skip


def block_permutation(
    n: int, options: Options, epoch: int, rank: int, block_start: int
) -> list[int] | None:
    """The hand-out order of a block of ``n`` documents of ``rank``'s shard (None: as read)."""
    if not options.shuffle or options.shuffle_buffer == 0:
        return None
    return permutation(n, options.seed, DOCUMENTS, epoch, rank, block_start)


def nothing_read(
    corpus: Corpus, options: Options, epoch: int, counters: Counters, skipped_files: int
) -> CorpusError:
    """An endless run whose whole epoch yielded nothing would wait forever: say why."""
    why = []
    if options.split != "all":
        why.append(f"split {options.split!r} (val_fraction={options.val_fraction})")
    if options.world_size > 1:
        why.append(f"rank {options.rank} of world_size {options.world_size}")
    skipped = counters.skipped_members + skipped_files
    if skipped:
        why.append(f"{skipped} members or files skipped")
    return CorpusError(
        f"epoch {epoch} yielded no document"
        + (f" ({', '.join(why)})" if why else "")
        + ": an endless run (epochs=None) would wait forever",
        path=os.path.dirname(corpus.units[0].path),
    )


def members_in_run(corpus: Corpus, options: Options, state: Mapping[str, Any] | None) -> int | None:
    """How many members ``options.rank``'s share reads in a run of ``options.epochs`` epochs
    from ``state`` (or from the start), for a progress bar: None without end, or in the rest
    of a resharded epoch (its pieces are cut when it starts). Passes that repeat documents
    after skips are not counted."""
    if options.epochs is None or (state is not None and "reshard" in state):
        return None
    counts = None
    if options.world_size > 1 or options.even_mode is not None:
        counts = even_counts(corpus, options)
    at_epoch, block = options.epoch, 0
    if state is not None:
        at_epoch, block = state["position"]["epoch"], state["position"]["block"]
    total = 0
    for epoch in range(at_epoch, options.epoch + options.epochs):
        shares = epoch_shares(len(corpus.units), counts, options, epoch)
        total += len(shares.share(options.rank, options.world_size, options.even_mode).units)
    return max(0, total - block)
