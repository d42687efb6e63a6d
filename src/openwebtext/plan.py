"""Plan: which units a rank reads in an epoch, and in what order. Pure functions.

The order is a function of ``(seed, epoch, rank, world_size)`` and the number of
units only, so every machine and every worker count sees the same stream.
Random draws come from NumPy's PCG64 seeded through ``SeedSequence`` and use
only ``Generator.random`` (uniform doubles), whose output NumPy keeps stable.

A share (a rank, a DataLoader worker, an HF shard) is an interval of the epoch's document
sequence, cut at documents (``EpochShares``, ``share_bounds``): the two shares that meet inside
a unit both read it, each taking its part, so an evened-out epoch leaves out (``drop``) or
repeats (``pad``) at most ``shares - 1`` documents, whatever the unit sizes.

Also here, because they are arithmetic on the plan: the slices of ``owt tokenize --shard``
and the Ray engine (``shard_range``, ``shard_count``, ``unit_groups``); where an evened-out
pass over a share ends (``pass_end``), and where a block's hand-out stops (``block_stop``).

Changing anything here changes the order of every seeded stream and breaks
every saved state: the golden tests in ``tests/test_stream_sharding.py`` and
``tests/test_loader.py`` pin it; ``tests/test_plan.py`` checks the arithmetic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from openwebtext.options import MOST_INT, as_int, countable, int_at_least

__all__ = [
    "EpochShares",
    "Rule",
    "Share",
    "Split",
    "advance",
    "block_stop",
    "even_end",
    "in_validation",
    "pass_end",
    "permutation",
    "plan",
    "shard_count",
    "shard_range",
    "share_bounds",
    "share_losses",
    "unit_groups",
]

#: How shares are evened out: ``drop`` cuts every share to the same smaller count, ``pad``
#: to the same larger one.
Rule = Literal["drop", "pad"]

# Streams of randomness, so that the unit order and the document shuffle never share draws.
UNITS, DOCUMENTS = 0, 1


def permutation(n: int, seed: int, *key: int) -> list[int]:
    """A permutation of ``range(n)`` that depends only on ``n``, ``seed`` and ``key``."""
    if n <= 1:
        return list(range(n))
    keys = np.random.Generator(np.random.PCG64([seed, *key])).random(n)
    order: list[int] = np.argsort(keys, kind="stable").tolist()
    return order


def plan(
    n_units: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int = 0,
    rank: int = 0,
    world_size: int = 1,
) -> list[int]:
    """The units ``rank`` reads in ``epoch``, in order.

    Units are shuffled (when ``shuffle``) for the whole corpus first, then dealt
    round-robin to ranks, so ranks are disjoint, together cover every unit once,
    and their unit counts differ by at most one.
    """
    order = permutation(n_units, seed, UNITS, epoch) if shuffle else list(range(n_units))
    return order[rank::world_size]


def shard_range(positions: int, index: int, count: int) -> tuple[int, int]:
    """Positions ``[start, stop)`` of slice ``index`` of ``count`` over ``positions``
    positions: consecutive, covering, their sizes differing by at most one.

    The one rule of ``owt tokenize --shard i/n`` and of the Ray engine's slices.

    Raises:
        ValueError: not ``0 <= index < count``.
    """
    index, count = as_int(index), as_int(count)  # (numpy's integers too, as every door)
    if not (countable(count, 1) and int_at_least(index, 0) and index < count):
        raise ValueError(f"a shard is i/n with 0 <= i < n <= {MOST_INT}, not {index}/{count}")
    return index * positions // count, (index + 1) * positions // count


def shard_count(positions: int, per_shard: int) -> int:
    """How many slices of at most ``per_shard`` positions cover ``positions`` (at least one)."""
    per_shard = as_int(per_shard)
    if not int_at_least(per_shard, 1):
        raise ValueError(f"units_per_task must be >= 1, not {per_shard!r}")
    return max(1, -(-positions // per_shard))


def unit_groups(units: int, per_group: int) -> list[range]:
    """Units ``0..units-1`` cut into consecutive groups of ``per_group`` (the last may be
    shorter): the read tasks of ``ray.read_openwebtext``."""
    per_group = as_int(per_group)
    if not int_at_least(per_group, 1):
        raise ValueError(f"units_per_task must be >= 1, not {per_group!r}")
    return [range(k, min(k + per_group, units)) for k in range(0, units, per_group)]


class Share(NamedTuple):
    """What one share (a rank, a DataLoader worker, an HF shard) reads in an epoch.

    A share is an interval of the epoch's document sequence (the units in their seeded order,
    each unit's documents in member order), cut at documents: ``units`` are the units that
    overlap it, in order; ``counts[p]`` the documents it takes of the unit at position ``p``
    (None: not counted, every document of every unit); ``trims`` maps the positions whose
    unit it takes only part of (the first and the last, on a boundary with the next share)
    to ``(lo, hi)``, the documents it takes by their index among the unit's documents (of
    the split).
    """

    units: list[int]
    counts: list[int] | None
    trims: dict[int, tuple[int, int]]

    @property
    def documents(self) -> int:
        """The documents of the share (its counts' sum)."""
        assert self.counts is not None
        return sum(self.counts)


def share_bounds(total: int, index: int, shares: int, rule: Rule | None) -> tuple[int, int]:
    """Share ``index`` of ``shares`` of a sequence of ``total`` documents: ``[start, stop)``.

    Shares start at ``index * total // shares``. Without a rule each ends where the next
    starts (they cover the sequence, their sizes differ by at most one); under ``drop`` each
    holds ``total // shares`` (at most ``shares - 1`` left out, each at a share's end); under
    ``pad`` each holds ``ceil(total / shares)`` and reaches into the next (at most
    ``shares - 1`` reads again: each twice at most while ``shares <= total``), the last one
    ending at the sequence's end.
    """
    start = index * total // shares
    if rule == "drop":
        return start, start + total // shares
    if rule == "pad":
        return start, start + -(-total // shares)
    return start, (index + 1) * total // shares


def share_losses(total: int, index: int, shares: int, rule: Rule | None) -> tuple[int, int]:
    """``(left out, read twice)`` documents that share ``index`` accounts for: ``drop``'s
    losses on the last share, ``pad``'s repeats on the share that reaches into the next."""
    if rule == "drop":
        return (total - shares * (total // shares) if index == shares - 1 else 0), 0
    if rule == "pad" and index < shares - 1:
        stop = share_bounds(total, index, shares, rule)[1]
        return 0, max(0, stop - (index + 1) * total // shares)
    return 0, 0


class EpochShares:
    """The shares of one epoch: the seeded unit order, laid out with the document counts.

    Args:
        order: The units in the epoch's order (``plan(..., world_size=1)``).
        counts: Documents of every unit (of the split), or None (not counted: one share only).
    """

    def __init__(self, order: Sequence[int], counts: Sequence[int] | None) -> None:
        self.order = list(order)
        self.counts = counts
        self.per_position: list[int] | None = None
        self.ends: np.ndarray | None = None
        if counts is not None:
            self.per_position = [counts[u] for u in self.order]
            self.ends = np.cumsum(np.asarray(self.per_position, dtype=np.int64))
        self.total = int(self.ends[-1]) if self.ends is not None and len(self.ends) else 0

    def share(self, index: int, shares: int, rule: Rule | None) -> Share:
        """Share ``index`` of ``shares`` under ``rule`` (``share_bounds``). One share is the
        whole epoch, every unit whole, as it always was."""
        if shares == 1:
            return Share(self.order, self.per_position, {})
        if self.ends is None or self.per_position is None:
            raise ValueError("cutting an epoch into shares needs the document counts")
        return self.interval(*share_bounds(self.total, index, shares, rule))

    def interval(self, start: int, stop: int) -> Share:
        """Documents ``[start, stop)`` of the epoch's sequence as a share."""
        assert self.ends is not None and self.per_position is not None
        if stop <= start:
            return Share([], [], {})
        first = int(np.searchsorted(self.ends, start, side="right"))
        last = int(np.searchsorted(self.ends, stop, side="left"))
        counts = self.per_position[first : last + 1]
        begins = [int(self.ends[p]) - self.per_position[p] for p in (first, last)]
        trims: dict[int, tuple[int, int]] = {}
        lo = start - begins[0]
        hi = min(int(self.ends[first]), stop) - begins[0]
        if (lo, hi) != (0, counts[0]):
            trims[0] = (lo, hi)
        if last > first and stop - begins[1] != counts[-1]:
            trims[last - first] = (0, stop - begins[1])
        taken = list(counts)
        for position, (lo, hi) in trims.items():
            taken[position] = hi - lo
        return Share(self.order[first : last + 1], taken, trims)


def pass_end(counts: Sequence[int], start: int, need: int) -> int:
    """Where an evened-out pass that starts at plan position ``start`` ends.

    Positions count the units of a share (``counts[p]``: its documents at position ``p``) and
    go on past its end (position ``p`` is ``p % len(counts)``): a share short of its target
    wraps around to its own start. The pass takes units until their ``counts`` reach ``need``
    documents, but never crosses the end of the lap ``start`` is in: its blocks must be cut
    where an uninterrupted run cuts them, wherever a resumed run starts.
    """
    n = len(counts)
    if n == 0:  # an empty share (fewer documents than shares, under drop)
        return start
    lap_end = (start // n + 1) * n
    end = start
    while need > 0 and end < lap_end:
        need -= counts[end % n]
        end += 1
    return end


def even_end(counts: Sequence[int], target: int) -> int:
    """The plan position where the evened-out passes of an epoch meet ``target`` when no
    document is skipped (passes from position 0, as ``pass_end`` cuts them).

    Passes that start at or past it repeat documents because skips left the share short.
    """
    start = got = 0
    if not counts or sum(counts) == 0:
        return 0
    while got < target:
        end = pass_end(counts, start, target - got)
        got += sum(counts[p % len(counts)] for p in range(start, end))
        start = end
    return start


def block_stop(
    n: int, first: int, *, target_left: int | None = None, take_left: int | None = None
) -> int:
    """Where the hand-out of a block of ``n`` documents stops, starting at ``first``.

    ``target_left`` and ``take_left`` are the documents the epoch's even target
    and ``take`` still allow (None: no bound).
    """
    stop = n
    if target_left is not None:
        stop = min(stop, first + target_left)
    if take_left is not None:
        stop = min(stop, first + take_left)
    return stop


class Split(NamedTuple):
    """Which documents to keep: the held-out ``val`` split, or the ``train`` rest."""

    which: Literal["train", "val"]
    fraction: float
    seed: int


def in_validation(name: str, fraction: float, seed: int) -> bool:
    """Whether document ``name`` is held out: a keyed hash of its name below ``fraction``.

    Decided per document from its name alone, so the split is the same whatever
    the order, the rank or the worker count, and train and val never overlap.
    """
    digest = hashlib.blake2b(
        name.encode("utf-8", "surrogateescape"), digest_size=8, key=seed.to_bytes(8, "little")
    ).digest()
    return bool(int.from_bytes(digest, "little") < fraction * 2.0**64)  # (a numpy fraction's too)


def advance(
    counts: Sequence[int],
    size: int,
    position: tuple[int, int, int],
    k: int,
    target: int | None,
) -> tuple[int, int]:
    """The ``(block, in_block)`` a stream at ``position`` (block, in_block, epoch documents)
    reaches after ``k`` more documents of its share (``counts``: documents per plan
    position), its blocks cut as a stream cuts them (no skips).

    ``target``: the even target of the epoch (passes as ``plan.pass_end`` cuts them), or
    None (one pass to the end of the share).
    """
    block, in_block, handed = position
    n = len(counts)
    while True:
        end = n if target is None else pass_end(counts, block, target - handed + in_block)
        p = block
        while p < end:
            q, docs = p, 0
            while q < end and docs < size:
                docs += counts[q % n]
                q += 1
            left = docs - in_block
            if k < left or k == 0:  # (a block of none next: a stream's state is at its start)
                return p, in_block + k
            k -= left
            handed += left
            in_block, p = 0, q
        if end == block or k == 0:
            return end, 0
        block = end
