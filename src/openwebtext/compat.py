"""The reference API: ``OpenWebTextLoader``, ``shuffle`` and ``take``.

Same names, arguments and item shape as the seed's ``openwebtext.py``, so its
``main.py`` runs unchanged, without its defects: the order is reproducible
(``random_state`` may be an int seed or a ``numpy.random.RandomState``), more
workers than files is fine, worker errors raise instead of hanging, and
per-document work stays out of NumPy.
"""

from __future__ import annotations

import os
import random
import sys
import weakref
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import islice
from typing import Any, TypeVar

import numpy as np

from openwebtext.index import Corpus
from openwebtext.loader import DocumentIterator
from openwebtext.options import Options, int_at_least, integral
from openwebtext.stream import InsideNext, closed

__all__ = ["OpenWebTextLoader", "shuffle", "take"]

T = TypeVar("T")
RandomState = int | np.random.RandomState | np.random.Generator | None

Item = tuple[tuple[int, int], tuple[str, str], str]


DEFAULT_SEED = 0


def _seed(random_state: RandomState) -> int:
    """An int seed from what the reference accepted; None is ``DEFAULT_SEED``."""
    if random_state is None:
        return DEFAULT_SEED
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    seed = integral(random_state)  # (numpy's integers too, as the reference took them)
    if int_at_least(seed, 0):
        return seed
    raise TypeError(
        f"random_state must be None, an int >= 0, a numpy RandomState or Generator, "
        f"not {random_state!r}"
    )


class OpenWebTextLoader:
    """Parallel loader over OpenWebText subset tars (the reference API).

    Yields ``((i, j), (part_name, entry_name), text)``: ``i`` is the member's
    index in its subset tar, ``j`` the document's index in the member.

    Args:
        subsets: Subset tars (or any input ``openwebtext.Corpus.open`` takes): a list of
            them, or one path (a str or ``os.PathLike``: one input, never its characters).
        num_workers: Worker processes (an int, or any integral number such as numpy's).
        prefetch: Kept for compatibility; must be > 1. Memory is bounded by
            whole units in flight (see ``Options.prefetch``), not documents.
        random_state: An int seed, a ``numpy.random.RandomState`` (one draw
            from it makes the seed), or None for seed 0: unlike the reference,
            every run is reproducible unless asked otherwise.
    """

    def __init__(
        self,
        subsets: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        num_workers: int = 1,
        prefetch: int = 2048,
        random_state: RandomState = None,
    ) -> None:
        try:
            larger = bool(prefetch > 1)  # (NaN is not)
        except (TypeError, ValueError):  # (ValueError: an array's truth)
            larger = False
        if not larger:
            raise ValueError(f"prefetch buffer should be strictly larger than 1, not {prefetch!r}")
        if isinstance(subsets, bytes) or not isinstance(subsets, str | os.PathLike | Iterable):
            raise TypeError(f"subsets are paths (str or os.PathLike, or a list of them), not "
                            f"{type(subsets).__name__}")  # fmt: skip
        self.subsets: list[str | os.PathLike[str]] = (
            [subsets] if isinstance(subsets, (str, os.PathLike)) else list(subsets)
        )
        if isinstance(subsets, AbstractSet | Mapping) or not all(
            isinstance(p, str | os.PathLike) for p in self.subsets
        ):  # (a set's order is another in each process)
            raise TypeError(f"subsets are paths (str or os.PathLike), in a list, not {subsets!r}")
        self.prefetch = prefetch
        self.seed = _seed(random_state)
        # Units are shuffled; documents keep their member order (the caller shuffles).
        self.options = Options(workers=num_workers, seed=self.seed, shuffle_buffer=0)
        self.num_workers = self.options.workers  # (a Python int, whatever integral it was)
        self._corpus: Corpus | None = None
        self._passes: weakref.WeakSet[Generator[Item, None, None]] = weakref.WeakSet()

    def __iter__(self) -> Iterator[Item]:
        """A pass of its own: another pass begun meanwhile (``zip(loader, loader)``, a peek)
        leaves this one going (each stops its workers when dropped, or at ``close``)."""
        if self._corpus is None:
            self._corpus = Corpus.open(self.subsets)
        iterator = DocumentIterator(self._corpus, self.options, as_tuples=True)
        running: Generator[Item, None, None] = iter(iterator)  # (the pass: its generator)
        self._passes.add(running)
        return running

    def close(self) -> None:
        """Stop the workers of every pass (each pass ends: a ``next()`` after is the end).

        Raises:
            InsideNext: another thread is inside a pass's ``next`` (that pass goes on; the
                others are closed).
        """
        if not all([closed(running) for running in list(self._passes)]):  # (each one tried)
            raise InsideNext()

    def __enter__(self) -> OpenWebTextLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def shuffle(
    it: Iterable[T], buffer_size: int = 1024, random_state: RandomState = None
) -> Iterator[T]:
    """Shuffle a stream through a buffer of ``buffer_size`` items.

    Each incoming item replaces a uniformly drawn buffered one, which is
    yielded; the rest of the buffer comes out in random order at the end.
    Draws use ``random.Random`` (a fraction of a microsecond each), seeded from
    ``random_state`` as in ``OpenWebTextLoader`` (None: seed 0).

    Raises:
        ValueError: ``buffer_size`` is not an int >= 1 (at most ``sys.maxsize``; said at the
            call, not at the first item).
    """
    if not (hasattr(it, "__iter__") or hasattr(it, "__getitem__")):
        raise TypeError(f"shuffle: it must be iterable, not {type(it).__name__}")
    size = integral(buffer_size)  # (numpy's integers too, as the reference took them)
    if not (int_at_least(size, 1) and size <= sys.maxsize):
        raise ValueError(f"buffer_size must be an int >= 1 and at most {sys.maxsize}, not "
                         f"{buffer_size!r}")  # fmt: skip
    return _shuffled(it, size, random.Random(_seed(random_state)))


def _shuffled(it: Iterable[T], buffer_size: int, rng: random.Random) -> Iterator[T]:
    draw = rng.random
    it = iter(it)
    buffer: list[Any] = list(islice(it, buffer_size))
    size = len(buffer)
    for item in it:
        k = int(draw() * size)
        yield buffer[k]
        buffer[k] = item
    rng.shuffle(buffer)
    yield from buffer


def take(it: Iterable[T], size: int) -> Iterator[T]:
    """The first ``size`` items of ``it``.

    Raises:
        ValueError: ``size`` is not an int >= 0 (and at most ``sys.maxsize``).
    """
    count = integral(size)  # (numpy's integers too, as the reference took them)
    if not (int_at_least(count, 0) and count <= sys.maxsize):
        raise ValueError(f"size must be an int >= 0 and at most {sys.maxsize}, not {size!r}")
    return islice(it, count)
