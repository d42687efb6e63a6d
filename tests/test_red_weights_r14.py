"""Weights at the edge of a float (session 37's red team): weights ``Mixture`` and
``set_weights`` took were refused a moment later, normalised (a share ``LEAST_SHARE`` let
through moved one ulp below it when its normalised weights were checked again: the run could
not start, or ``next()`` after ``set_weights`` ended it); a positive weight whose share
underflowed to 0.0 was taken as a weight of 0 (the part never came); ``Decimal`` weights were
refused as not finite."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from openwebtext import Loader, Mixture
from openwebtext.mixing import LEAST_SHARE, TAKEN_SHARE, check_weights
from openwebtext.stream.schema import MixtureConfig
from openwebtext.synth import write_corpus

#: Found by the red team: e's share is 1e-12 exactly, then 1e-12 less an ulp normalised again.
AT_THE_EDGE = [0.6413312397869063, 6.407621028993829, 3.287632227811725, 2.2373965507388123,
               1.2573981047343845e-11]  # fmt: skip


@pytest.mark.parametrize("edge", [LEAST_SHARE, LEAST_SHARE * (1 - 1e-9)])
def test_weights_taken_are_taken_again_normalised(edge: float) -> None:
    """Sampled about the refusal's edge (and about where a first fix had moved it, a
    reviewer's): the weights taken, normalised again as a state's and their config are, are
    taken again."""
    rng, taken = random.Random(0), 0
    for _ in range(20_000):
        n = rng.randint(2, 6)
        weights = [rng.uniform(0, 10) for _ in range(n - 1)]
        weights.append(sum(weights) * edge * rng.uniform(0.999999, 1.000001))
        try:
            shares = check_weights(weights, n)
        except ValueError:
            continue
        taken += 1
        again = check_weights(check_weights(shares, n, least=TAKEN_SHARE), n, least=TAKEN_SHARE)
        MixtureConfig(tuple("abcdef"[:n]), again, "documents", "stratified")
    assert 5_000 < taken < 15_000  # (both sides of the edge were tried)
    assert check_weights(check_weights(AT_THE_EDGE, 5), 5, least=TAKEN_SHARE)


def test_a_share_a_hair_below_the_edge_is_refused_where_it_is_given() -> None:
    """The reviewer's: taken by ``Mixture``, then refused by its own config at ``iter()``."""
    with pytest.raises(ValueError, match=r"part 'b'.* is 9.99999999e-13 of the total"):
        check_weights([5.398779864433489, 5.398779859040107e-12], 2, ("a", "b"))


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("edge")
    for k, name in enumerate("abcde"):
        write_corpus(root / name, subsets=1, members=1, docs=6, seed=k, workers=1)
    return {name: root / name for name in "abcde"}


def test_a_mixture_at_the_edge_runs_resumes_and_takes_its_weights_set(
    parts: dict[str, Path],
) -> None:
    weights = dict(zip("abcde", AT_THE_EDGE, strict=True))
    loader = Loader(Mixture(parts, weights), workers=0, seed=0)
    with loader.iter() as docs:
        first = [next(docs).name for _ in range(5)]
        state = json.loads(json.dumps(docs.state_dict()))
        after = next(docs).name
    with loader.iter(state=state) as again:
        assert next(again).name == after
    even = Loader(Mixture(parts), workers=0, seed=0)
    with even.iter() as docs:
        next(docs)
        docs.set_weights(weights)
        next(docs)
        state = json.loads(json.dumps(docs.state_dict()))
        after = next(docs).name
    with even.iter(state=state) as again:
        assert next(again).name == after
    assert len(set(first)) == 5


@pytest.mark.parametrize("weights", [{"a": 1e308, "b": 1e-300}, {"a": 1e300, "b": 1e-30},
                                     {"a": 10**300, "b": 1e-30}])  # fmt: skip
def test_a_positive_weight_whose_share_underflows_is_refused(
    parts: dict[str, Path], weights: dict[str, float]
) -> None:
    two = {name: parts[name] for name in weights}
    with pytest.raises(ValueError, match=r"part 'b'.*too small to ever be chosen"):
        Mixture(two, weights)


def test_decimal_weights_are_real_numbers_and_a_string_is_not() -> None:
    assert check_weights([Decimal("0.5"), Fraction(1, 2), 1], 3) == (0.25, 0.25, 0.5)
    with pytest.raises(ValueError, match=r"a weight must be a real number .*not '0.5'"):
        check_weights(["0.5", 1], 2)
    with pytest.raises(ValueError, match=r"finite number >= 0, not Decimal\('NaN'\)"):
        check_weights([Decimal("nan"), 1], 2)
