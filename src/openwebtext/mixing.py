"""The order in which the parts of a mixture take turns: a pure function of the weights, the
sizes of the documents and what was handed out, with no I/O (the plan of a mixture).

Stratified, not sampled: ``Interleave`` is weighted fair queueing (WF2Q) with every part always
backlogged. A part is *eligible* when it has not run ahead of its share (``served_i <= w_i *
total``); among the eligible ones the part whose next document would end earliest on its own
clock (``(served_i + size_i) / w_i``) goes next, ties to the lower index. Counted by documents
(every size 1), after any ``n`` documents part ``i`` has handed out within one document of ``w_i
* n``; counted by tokens, within one document's ids of ``w_i * T``. ``tests/test_mixing.py``
checks both bounds with Hypothesis for 1 to 64 parts, weights of 0 included.

Weights change at a position (a schedule) or when the training loop says so (``set_weights``);
the proportions count from the change: ``served`` and ``total`` start again at 0, so the new
weights hold within one document from there, whatever came before.

Sampled (``sampling="random"``): ``draw``, a seeded draw per position, a pure function of the
seed, the rank and the position.
"""

from __future__ import annotations

import decimal
import math
import numbers
from collections.abc import Sequence

import numpy as np

__all__ = ["LEAST_SHARE", "TAKEN_SHARE", "WIDE", "Interleave", "check_weights", "draw"]

#: The smallest share of the total a positive weight may have: one document in 10**12 is a
#: part that never comes (a run of ``epochs`` would wait for it without end).
LEAST_SHARE = 1e-12

#: The smallest share of weights once taken, normalised again (a state's, the weights in
#: force): rounding moves a share by ulps, never by half, so none taken is refused again.
TAKEN_SHARE = LEAST_SHARE / 2

#: From how many parts ``Interleave.choose`` looks at them as arrays: a loop over the parts
#: costs ~0.1 µs per part per document (42 µs a document of 400 parts, ten times the rest of
#: the consumer's), numpy ~6 µs whatever the parts (``benchmarks/bench_mixture.py``).
WIDE = 48


def check_weights(
    weights: Sequence[float], parts: int, names: Sequence[str] = (), least: float = LEAST_SHARE
) -> tuple[float, ...]:
    """``weights`` normalised to sum to 1 (``least``: the smallest share of a positive one;
    ``TAKEN_SHARE`` for weights once taken).

    Raises:
        ValueError: not ``parts`` finite numbers >= 0 with a positive sum (a weight refused
            named by its part, of ``names``).
    """
    if len(weights) != parts:
        raise ValueError(f"{len(weights)} weights for {parts} parts")
    whose = [f" (part {name!r})" for name in names] or [""] * parts
    values: list[float] = []
    for w, part in zip(weights, whose, strict=True):  # any real number: numpy's too
        if not isinstance(w, numbers.Real | decimal.Decimal) or isinstance(w, bool):
            raise ValueError(f"a weight must be a real number (an int, a float, a Fraction, a "
                             f"Decimal), not {w!r}{part}")  # fmt: skip
        try:
            value = float(w)
        except (OverflowError, ValueError):  # past a float's range (or a signalling NaN)
            value = math.inf
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"a weight must be a finite number >= 0, not {w!r}{part}")
        values.append(value)
    try:
        total = math.fsum(values)
    except OverflowError:  # finite weights whose sum is not: scaled down first
        top = max(values)
        values = [v / top for v in values]
        total = math.fsum(values)
    if total <= 0:
        raise ValueError("at least one weight must be positive")
    shares = tuple(v / total for v in values)
    for w, value, share, part in zip(weights, values, shares, whose, strict=True):
        if value > 0 and share < least:  # never its turn (1 / share overflows, or near; a
            # share that underflowed to 0 too: the weight is not 0)
            raise ValueError(
                f"a weight of {w!r}{part} is {share:.10g} of the total: too small to ever be "
                f"chosen (at least {least:g}); give 0 to leave the part out"
            )
    return shares


class Interleave:
    """Which part hands out the next document (see the module's docstring).

    Args:
        weights: One per part, >= 0, normalised here.
        served: What each part handed out since the weights were set (documents, or ids).
    """

    def __init__(self, weights: Sequence[float], served: Sequence[int] | None = None) -> None:
        self.weights = check_weights(weights, len(weights), least=TAKEN_SHARE)
        self.served = [0] * len(weights) if served is None else list(served)
        if len(self.served) != len(self.weights) or any(s < 0 for s in self.served):
            raise ValueError(f"served must be {len(self.weights)} counts >= 0")
        self.total = sum(self.served)
        self._wide: tuple[np.ndarray, np.ndarray] | None = None
        if len(self.weights) >= WIDE:  # (the weights, and ``served`` kept beside the list)
            self._wide = np.array(self.weights), np.array(self.served, dtype=np.float64)

    def choose(self, sizes: Sequence[float] | None = None) -> int:
        """The part whose document comes next; ``sizes``: each part's next document's size (by
        tokens), None: by documents. A part of weight 0 is never chosen, nor one of size
        ``math.inf`` (a replay's part with no document left): -1 when every part the turn
        may fall to is one (a replay's counts that are not its turns').

        Of ``WIDE`` parts or more, the same arithmetic over arrays (the same floats: the same
        part, ties to the lower index), at a cost per document that stays about flat."""
        if self._wide is not None:
            return self._choose_wide(self._wide, sizes)
        best, best_end = -1, math.inf
        for i, w in enumerate(self.weights):
            if w == 0 or self.served[i] > w * self.total + 1e-9 * (1 + self.total):
                continue
            end = (self.served[i] + (1 if sizes is None else sizes[i])) / w
            if end < best_end:
                best, best_end = i, end
        assert best >= 0 or sizes is not None  # a positive part is never ahead (shares sum to 1)
        return best

    def _choose_wide(self, wide: tuple[np.ndarray, np.ndarray], sizes: Sequence[float] | None,
                     ) -> int:  # fmt: skip
        weights, served = wide
        total = self.total
        with np.errstate(divide="ignore", invalid="ignore"):
            ahead = served > weights * float(total) + 1e-9 * float(1 + total)
            ends = (served + (1.0 if sizes is None else np.asarray(sizes, np.float64))) / weights
        ends[ahead | (weights == 0)] = math.inf
        best = int(np.argmin(ends))  # (the first of the least: the lower index)
        if ends[best] == math.inf:
            assert sizes is not None  # a positive part is never ahead (shares sum to 1)
            return -1
        return best

    def take(self, part: int, size: int = 1) -> None:
        """Count a document of ``size`` (1 by documents) handed out by ``part``."""
        self.served[part] += size
        self.total += size
        if self._wide is not None:
            self._wide[1][part] = self.served[part]

    def set_weights(self, weights: Sequence[float]) -> None:
        """New weights, counted from here."""
        self.weights = check_weights(weights, len(self.weights), least=TAKEN_SHARE)
        self.served = [0] * len(self.weights)
        self.total = 0
        if self._wide is not None:
            self._wide = np.array(self.weights), np.zeros(len(self.weights))


def draw(weights: Sequence[float], seed: tuple[int, int], position: int) -> int:
    """A seeded draw of a part for ``position`` (``sampling="random"``): a pure function of
    the seed, the rank and the position, so that a resumed run draws the same."""
    x = _mix64(_mix64(_seeded(seed[0]) ^ seed[1]) ^ position)
    u = (x >> 11) / float(1 << 53)
    total = 0.0
    last = 0
    for i, w in enumerate(weights):
        if w > 0:
            total += w
            last = i
            if u < total:
                return i
    return last


def _seeded(seed: int) -> int:
    """``_mix64`` of a seed, every 64 bits of it folded in (seeds 0 and 2**64 draw apart)."""
    x, rest = _mix64(seed), seed >> 64
    while rest:
        x, rest = _mix64(x ^ (rest & 0xFFFFFFFFFFFFFFFF)), rest >> 64
    return x


def _mix64(x: int) -> int:
    """splitmix64's finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)
