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

import numpy as np

__all__ = ["permutation", "plan"]

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
