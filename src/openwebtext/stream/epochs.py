"""The epochs of a stream: the documents an evened-out rank hands out in one epoch and the
passes over its shard that make them (``EvenEpoch``), the document shuffle of a block, and why
an endless run whose epoch yielded nothing must stop.

The arithmetic is ``plan``'s; this module holds what a stream decides with it: when a rank is
short (skips) and repeats, when it is stuck, and what it tells the user.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from openwebtext.errors import CorpusError
from openwebtext.index import Corpus
from openwebtext.options import Options
from openwebtext.plan import DOCUMENTS, epoch_target, even_end, pass_end, permutation, plan
from openwebtext.stream.state import Counters

__all__ = [
    "EvenEpoch",
    "block_permutation",
    "even_counts",
    "even_target",
    "nothing_read",
    "shard_order",
]

log = logging.getLogger("openwebtext")


def even_counts(corpus: Corpus, options: Options) -> tuple[int, ...]:
    """Documents of every unit in the stream's split: evening ranks out needs them.

    Raises:
        CorpusError: the corpus was not counted (by ``owt index``) for this split.
    """
    counts = corpus.counts
    per_unit = None
    if counts is not None:
        per_unit = counts.per_unit(options.split, options.val_fraction, options.val_seed)
    if per_unit is None:
        raise CorpusError(
            f"even sharding (world_size={options.world_size}, even_rule={options.even_rule!r})"
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

    def __init__(
        self, order: Sequence[int], counts: Sequence[int], target: int, *, rank: int, epoch: int
    ) -> None:
        self.order = order
        self.counts = counts
        self.target = target
        self.rank = rank
        self.epoch = epoch
        self.expected_end = even_end(order, counts, self.target)
        self.warned = False

    def next_pass(self, start: int, in_block: int, handed: int) -> tuple[int, bool]:
        """Where the pass from plan position ``start`` ends (``in_block`` documents of its first
        block and ``handed`` of the epoch already handed out), and whether it repeats."""
        end = pass_end(self.order, self.counts, start, self.target - handed + in_block)
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
        if after == before and end - start >= len(self.order):
            raise CorpusError(f"rank {self.rank} read no document in a whole pass over its shard")


def shard_order(n_units: int, options: Options, epoch: int) -> list[int]:
    """The units ``options.rank`` reads in ``epoch``, in order (``plan.plan``)."""
    return plan(
        n_units,
        shuffle=options.shuffle,
        seed=options.seed,
        epoch=epoch,
        rank=options.rank,
        world_size=options.world_size,
    )


def even_target(order: Sequence[int], counts: Sequence[int], options: Options, epoch: int) -> int:
    """The documents ``options.rank`` hands out in ``epoch`` (``plan.epoch_target``).

    Raises:
        CorpusError: the rank has no member but its target is not 0.
    """
    assert options.even_mode is not None
    target = epoch_target(
        counts,
        shuffle=options.shuffle,
        seed=options.seed,
        epoch=epoch,
        world_size=options.world_size,
        rule=options.even_mode,
    )
    if target > 0 and not order:
        raise CorpusError(
            f"rank {options.rank} has no member to read: world_size {options.world_size} is "
            f"more than the {len(counts)} members; use even_rule='drop' or fewer ranks"
        )
    return target


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
