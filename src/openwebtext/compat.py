"""The reference API: ``OpenWebTextLoader``, ``shuffle`` and ``take``.

Same names, arguments and item shape as the seed's ``openwebtext.py``, so its
``main.py`` runs unchanged, without its defects: the order is reproducible
(``random_state`` may be an int seed or any random generator the reference took:
numpy's, ``np.random``, ``random.Random``), more workers than files is fine, worker
errors raise instead of hanging, and per-document work stays out of NumPy.
"""

from __future__ import annotations

import inspect
import os
import random
import sys
import threading
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import islice
from typing import Any, TypeVar

import numpy as np

from openwebtext.index import Corpus
from openwebtext.loader import DocumentIterator
from openwebtext.options import Options, int_at_least, integral

__all__ = ["OpenWebTextLoader", "shuffle", "take"]

T = TypeVar("T")
RandomState = object
"""None, an int >= 0, or a random generator: anything with ``integers``, ``getrandbits`` or
``randint`` (numpy's ``Generator``, ``RandomState`` and ``np.random``; ``random.Random`` and
the ``random`` module), as the reference took any object it could draw from."""

Item = tuple[tuple[int, int], tuple[str, str], str]


DEFAULT_SEED = 0

#: The draw that makes a seed, by the first method a generator has (a ``Generator``'s
#: ``integers``; ``random.Random``'s ``getrandbits``, before its ``randint``; a ``RandomState``
#: or ``np.random``'s ``randint``, the draw a ``RandomState`` always made).
DRAWS = (("integers", (0, 2**63 - 1)), ("getrandbits", (63,)), ("randint", (0, 2**31 - 1)))


def _seed(random_state: RandomState) -> int:
    """An int seed from what the reference accepted; None is ``DEFAULT_SEED``."""
    if random_state is None:
        return DEFAULT_SEED
    if isinstance(random_state, np.random.RandomState):  # (the draws golden orders rest on)
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    seed = integral(random_state)  # (numpy's integers too, as the reference took them)
    if int_at_least(seed, 0):
        return seed
    if seed is None:  # (a negative int is no generator)
        for name, args in DRAWS:
            draw = getattr(random_state, name, None)
            if callable(draw):
                drawn = integral(draw(*args))
                if not int_at_least(drawn, 0):
                    raise TypeError(f"random_state.{name}{args} gave no int >= 0 to seed from")
                return drawn
    raise TypeError(
        f"random_state must be None, an int >= 0, or a random generator with integers(), "
        f"getrandbits() or randint() (numpy's Generator, RandomState or np.random; "
        f"random.Random or the random module), not {random_state!r}"
    )


class OpenWebTextLoader:
    """Parallel loader over OpenWebText subset tars (the reference API).

    Yields ``((i, j), (part_name, entry_name), text)``: ``i`` is the member's
    index in its subset tar, ``j`` the document's index in the member.

    The loader is its own iterator of one pass, as the reference's was: ``iter(loader)`` is
    the loader (its pass begun at the first ``iter`` or ``next``), and ``next(loader)`` that
    pass's next document. So a peek with ``next(loader)`` and then ``for item in loader``
    reads every document once, ``zip(loader, loader)`` pairs each document with the next, a
    second ``for`` after a ``break`` goes on where the first stopped, and one after the pass
    ended reads nothing (``shuffle`` and ``take`` call ``iter`` on it again, as ``for`` does:
    an iterator never begins anew). For another pass, another loader (``copy.copy(loader)``
    once the pass is over: the same seeded order). A pass's workers stop at its end, at
    ``close()`` (the exit of a ``with``), or when the loader is dropped.

    Args:
        subsets: Subset tars (or any input ``openwebtext.Corpus.open`` takes): a list of
            them, or one path (a str or ``os.PathLike``: one input, never its characters).
        num_workers: Worker processes (an int >= 0, or any integral number such as numpy's;
            0 reads in this process).
        prefetch: Kept for compatibility; must be > 1. Memory is bounded by
            whole units in flight (see ``Options.prefetch``), not documents.
        random_state: An int seed, a random generator (one draw from it makes the seed:
            numpy's ``Generator``, ``RandomState`` or ``np.random``; ``random.Random`` or
            ``random``; anything with ``integers``, ``getrandbits`` or ``randint``), or None
            for seed 0: unlike the reference, every run is reproducible unless asked otherwise.

    Raises:
        TypeError: ``num_workers`` is not an integral number, ``random_state`` is none of
            those, or ``subsets`` are not paths.
        ValueError: ``num_workers`` is negative, or ``prefetch`` not > 1.
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
        workers = integral(num_workers)  # (said in the reference's words, not Options')
        if not int_at_least(workers, 0):
            error = TypeError if workers is None else ValueError
            raise error(f"num_workers must be an int >= 0 (numpy's integers too), not "
                        f"{num_workers!r}")  # fmt: skip
        self.prefetch = prefetch
        self.seed = _seed(random_state)
        # Units are shuffled; documents keep their member order (the caller shuffles).
        self.options = Options(workers=workers, seed=self.seed, shuffle_buffer=0)
        self.num_workers = self.options.workers  # (a Python int, whatever integral it was)
        self._pass: DocumentIterator | None = None  # (its pass, once begun)
        self._documents: Generator[Item, None, None] | None = None  # (its generator: its state)
        self._closed = False  # (closed before its pass: it never begins one)
        self._starting = threading.Lock()  # (two threads' first next(): one pass)

    def __iter__(self) -> OpenWebTextLoader:
        """The loader itself, its pass begun if none was (never anew: ``for``, ``shuffle`` and
        ``take`` call ``iter`` on what they are given, an ended pass's too)."""
        self._begun()
        return self

    def __next__(self) -> Item:
        """The running pass's next document (a pass begun if none ever was).

        Raises:
            StopIteration: the pass ended or was closed (again at every call).
            RuntimeError: the pass failed in an earlier ``next``.
            InsideNext: another thread is inside ``next`` (a loader is read on one thread).
        """
        running = self._pass or self._begun()
        if running is None:  # (closed before its pass)
            raise StopIteration
        item: Item = next(running)
        return item

    def _begun(self) -> DocumentIterator | None:
        """Its pass, begun (the corpus opened) if none was; None: closed before one (two
        threads' first ``next``: one pass)."""
        with self._starting:
            if self._pass is None and not self._closed:
                running = DocumentIterator(Corpus.open(self.subsets), self.options, as_tuples=True)
                self._pass, self._documents = running, iter(running)
            return self._pass

    def close(self) -> None:
        """Stop the pass's workers: it ends (``next(loader)`` raises ``StopIteration``, and a
        loader closed before its pass never begins one). Safe to call twice.

        Raises:
            InsideNext: another thread is inside ``next`` (the pass goes on).
        """
        if self._pass is None:
            self._closed = True
        else:
            self._pass.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled or copied as what it reads (its subsets, workers and seed): a loader of its
        own, with no pass; refused while a pass runs (its workers are this process's)."""
        documents = self._documents
        if documents is not None and inspect.getgeneratorstate(documents) != inspect.GEN_CLOSED:
            raise TypeError("an OpenWebTextLoader inside a pass does not pickle or copy (its "
                            "workers are this process's): copy it before reading, or after "
                            "close()")  # fmt: skip
        return type(self), (self.subsets, self.num_workers, self.prefetch, self.seed)

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


def take(it: Iterable[T], size: int | None) -> Generator[T, None, None]:
    """The first ``size`` items of ``it`` (None: all of them), as a generator: ``iter(it)``
    is called at its first ``next``, as the reference's (``take(loader, n)`` opens nothing
    before it is read), and it has ``close``.

    Raises:
        ValueError: ``size`` is not None nor an int >= 0 (at most ``sys.maxsize``; said at
            the call, not at the first item).
    """
    count = None if size is None else integral(size)  # (numpy's integers too, as the reference)
    if size is not None and not (int_at_least(count, 0) and count <= sys.maxsize):
        raise ValueError(f"size must be an int >= 0 and at most {sys.maxsize} (or None: all), "
                         f"not {size!r}")  # fmt: skip
    return _taken(it, count)


def _taken(it: Iterable[T], count: int | None) -> Generator[T, None, None]:
    yield from islice(it, count)
