"""Plan: which units a rank reads in an epoch, and in what order. Pure functions.

The order is a function of ``(seed, epoch, rank, world_size)`` and the number of
units only, so every machine and every worker count sees the same stream.
Random draws come from NumPy's PCG64 seeded through ``SeedSequence`` and use
only ``Generator.random`` (uniform doubles), whose output NumPy keeps stable.

Changing anything here changes the order of every seeded stream and breaks
every saved state: the golden tests in ``tests/test_plan.py`` and
``tests/test_loader.py`` pin it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np

__all__ = ["Split", "epoch_target", "in_validation", "permutation", "plan"]

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
