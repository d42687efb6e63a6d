"""Plan: which units a rank reads in an epoch, and in what order. Pure functions.

The order is a function of ``(seed, epoch, rank, world_size)`` and the number of
units only, so every machine and every worker count sees the same stream.
Random draws come from NumPy's PCG64 seeded through ``SeedSequence`` and use
only ``Generator.random`` (uniform doubles), whose output NumPy keeps stable.

Also here, because they are arithmetic on the plan: the slices of ``owt tokenize --shard``
and the Ray engine (``shard_range``, ``shard_count``, ``unit_groups``); the documents each rank
yields when ranks are evened out (``epoch_target``), where an evened-out pass
over a shard ends (``pass_end``), and where a block's hand-out stops
(``block_stop``).

Changing anything here changes the order of every seeded stream and breaks
every saved state: the golden tests in ``tests/test_stream_sharding.py`` and
``tests/test_loader.py`` pin it; ``tests/test_plan.py`` checks the arithmetic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

from openwebtext.options import int_at_least

__all__ = [
    "Split",
    "block_stop",
    "epoch_target",
    "even_end",
    "in_validation",
    "members_in_run",
    "pass_end",
    "permutation",
    "plan",
    "shard_count",
    "shard_range",
    "unit_groups",
]

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
    if not (int_at_least(count, 1) and int_at_least(index, 0) and index < count):
        raise ValueError(f"a shard is i/n with 0 <= i < n, not {index}/{count}")
    return index * positions // count, (index + 1) * positions // count


def shard_count(positions: int, per_shard: int) -> int:
    """How many slices of at most ``per_shard`` positions cover ``positions`` (at least one)."""
    if not int_at_least(per_shard, 1):
        raise ValueError(f"units_per_task must be >= 1, not {per_shard!r}")
    return max(1, -(-positions // per_shard))


def unit_groups(units: int, per_group: int) -> list[range]:
    """Units ``0..units-1`` cut into consecutive groups of ``per_group`` (the last may be
    shorter): the read tasks of ``ray.read_openwebtext``."""
    if not int_at_least(per_group, 1):
        raise ValueError(f"units_per_task must be >= 1, not {per_group!r}")
    return [range(k, min(k + per_group, units)) for k in range(0, units, per_group)]


def epoch_target(
    counts: Sequence[int],
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
    world_size: int,
    rule: Literal["drop", "pad"],
) -> int:
    """Documents every rank yields in ``epoch`` so that all ranks yield the same number.

    ``counts[u]`` is the number of documents of unit ``u``. ``drop``: the
    smallest rank's total (larger ranks stop early); ``pad``: the largest
    (smaller ranks wrap around to the start of their own shard).
    """
    order = permutation(len(counts), seed, UNITS, epoch) if shuffle else range(len(counts))
    totals = [0] * world_size
    for position, unit in enumerate(order):
        totals[position % world_size] += counts[unit]
    return min(totals) if rule == "drop" else max(totals)


def pass_end(order: Sequence[int], counts: Sequence[int], start: int, need: int) -> int:
    """Where an evened-out pass that starts at plan position ``start`` ends.

    Positions count units of ``order`` (a rank's shard) and go on past its end
    (position ``p`` is ``order[p % len(order)]``): a rank short of its target
    wraps around to the start of its own shard. The pass takes units until
    their ``counts`` reach ``need`` documents, but never crosses the end of the
    shard lap ``start`` is in: its blocks must be cut where an uninterrupted run
    cuts them, wherever a resumed run starts.
    """
    n = len(order)
    lap_end = (start // n + 1) * n
    end = start
    while need > 0 and end < lap_end:
        need -= counts[order[end % n]]
        end += 1
    return end


def even_end(order: Sequence[int], counts: Sequence[int], target: int) -> int:
    """The plan position where the evened-out passes of an epoch meet ``target`` when no
    document is skipped (passes from position 0, as ``pass_end`` cuts them).

    Passes that start at or past it repeat documents because skips left the rank short.
    """
    start = got = 0
    if not order or sum(counts[u] for u in order) == 0:
        return 0
    while got < target:
        end = pass_end(order, counts, start, target - got)
        got += sum(counts[order[p % len(order)]] for p in range(start, end))
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
    return int.from_bytes(digest, "little") < fraction * 2.0**64


def members_in_run(
    n_units: int,
    *,
    rank: int,
    world_size: int,
    epoch: int,
    epochs: int | None,
    position: tuple[int, int] | None = None,
) -> int | None:
    """How many units ``rank`` reads in a run of ``epochs`` epochs from ``epoch`` on, or
    None for a run without end (``epochs`` None).

    ``position`` is where a resumed run starts, ``(epoch, block)`` of its state: the
    units before it are not read again.
    """
    if epochs is None:
        return None
    per_epoch = len(range(rank, n_units, world_size))
    at_epoch, block = position if position is not None else (epoch, 0)
    return max(0, per_epoch * (epoch + epochs - at_epoch) - block)
