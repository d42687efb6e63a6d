"""Random draws made from uniforms only: the one sampler, inverse-CDF picks, :class:`Draw`.

Determinism: all randomness comes from ``numpy.random.Generator(PCG64)`` through
``Generator.random`` only (uniform doubles; every other distribution is derived here), so
the text does not move when numpy changes its other samplers. Changing anything in the
generator changes every document: bump :data:`~openwebtext.synth.GENERATOR_VERSION` then,
so cached corpora and saved goldens are not mixed up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


def uniform(rng: np.random.Generator, n: int) -> FloatArray:
    """``n`` uniform doubles in [0, 1): the only sampler used anywhere."""
    return rng.random(n)


def pick(cum: FloatArray, u: FloatArray) -> IntArray:
    """Inverse-CDF draw: indices into a table whose cumulative weights are ``cum``."""
    idx: IntArray = np.searchsorted(cum, u * cum[-1], side="right")
    return np.minimum(idx, len(cum) - 1)


def cumulative(weights: Sequence[float]) -> FloatArray:
    return np.cumsum(np.asarray(weights, dtype=np.float64))


def normal(rng: np.random.Generator) -> float:
    """One standard normal draw (Box-Muller on two uniforms)."""
    u1, u2 = uniform(rng, 2).tolist()
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)


class Draw:
    """Scalar uniforms drawn in blocks (Generator.random per scalar is slow)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.buf: list[float] = []

    def __call__(self) -> float:
        if not self.buf:
            self.buf = uniform(self.rng, 256).tolist()[::-1]
        return self.buf.pop()

    def below(self, n: int) -> int:
        """Integer uniform in [0, n)."""
        return min(int(self() * n), n - 1)

    def choice(self, items: Sequence[str]) -> str:
        return items[self.below(len(items))]
