"""The plan of a mixture (``mixing.Interleave``), with no decompression: every prefix of the
interleaving within one document of the weights, by documents and by tokens, also across a
weight change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext.mixing import Interleave, check_weights

weights_lists = st.lists(
    st.one_of(st.just(0.0), st.floats(0.001, 1.0), st.integers(0, 50).map(float)),
    min_size=1,
    max_size=64,
).filter(lambda ws: sum(ws) > 0)


def _run_documents(weights: list[float], n: int) -> list[int]:
    order = Interleave(weights)
    picks = []
    for _ in range(n):
        part = order.choose()
        order.take(part)
        picks.append(part)
    return picks


@settings(max_examples=200, deadline=None)
@given(weights=weights_lists, n=st.integers(1, 600))
def test_every_prefix_by_documents_is_within_one_document(weights: list[float], n: int) -> None:
    share = check_weights(weights, len(weights))
    counts = [0] * len(weights)
    for k, part in enumerate(_run_documents(weights, n), start=1):
        counts[part] += 1
        for i, c in enumerate(counts):
            assert abs(c - share[i] * k) <= 1 + 1e-9, (k, i, c, share[i] * k)
    assert all(c == 0 for c, w in zip(counts, weights, strict=True) if w == 0)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), weights=weights_lists, n=st.integers(1, 300))
def test_every_prefix_by_tokens_is_within_one_document_of_ids(
    data: st.DataObject, weights: list[float], n: int
) -> None:
    """Each part's documents have random lengths; the next one's is known (peeked). The
    lengths come from a random generator Hypothesis seeds: drawn one by one, up to 64 x 300
    of them, they made generating an example cost far more than checking it."""
    share = check_weights(weights, len(weights))
    rnd = data.draw(st.randoms(use_true_random=False))
    lengths = [[rnd.randint(1, 2000) for _ in range(n)] for _ in weights]
    longest = max(max(ls) for ls in lengths)
    order = Interleave(weights)
    taken, ids = [0] * len(weights), [0] * len(weights)
    for _ in range(n):
        sizes = [lengths[i][taken[i]] for i in range(len(weights))]
        part = order.choose(sizes)
        order.take(part, sizes[part])
        taken[part] += 1
        ids[part] += sizes[part]
        total = sum(ids)
        for i, t in enumerate(ids):
            assert abs(t - share[i] * total) <= longest + 1e-6, (i, t, share[i] * total)


@settings(max_examples=100, deadline=None)
@given(before=weights_lists, data=st.data(), n=st.integers(0, 300), m=st.integers(1, 300))
def test_a_weight_change_is_honoured_from_there(
    before: list[float], data: st.DataObject, n: int, m: int
) -> None:
    after = data.draw(
        st.lists(st.just(0.0) | st.floats(1e-6, 10), min_size=len(before),
                 max_size=len(before)).filter(
            lambda ws: sum(ws) > 0
        )
    )
    order = Interleave(before)
    for _ in range(n):
        order.take(order.choose())
    order.set_weights(after)
    share = check_weights(after, len(after))
    counts = [0] * len(after)
    for k in range(1, m + 1):
        part = order.choose()
        order.take(part)
        counts[part] += 1
        assert all(abs(c - share[i] * k) <= 1 + 1e-9 for i, c in enumerate(counts))


def test_the_order_is_pinned() -> None:
    """Golden: changing it changes every mixture's documents (and breaks saved states)."""
    assert _run_documents([0.7, 0.3], 10) == [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
    assert _run_documents([1, 1, 2], 8) == [2, 0, 1, 2, 2, 0, 1, 2]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([0, 0], "at least one weight must be positive"),
        ([1, -1], "finite number >= 0, not -1"),
        ([1, float("nan")], "finite number >= 0"),
        ([True, 1], "not True"),
    ],
)
def test_bad_weights_are_refused(weights: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Interleave(weights)


@pytest.mark.parametrize("tiny", [1e-320, 1e-200, 1e-13])
def test_a_weight_too_small_to_ever_be_chosen_is_refused(tiny: float) -> None:
    """A part of weight 1e-320 was never chosen (1 / its share overflowed): a run of one
    epoch waited for it without end."""
    with pytest.raises(ValueError, match="too small to ever be chosen"):
        check_weights([1.0, tiny], 2)
    assert check_weights([1.0, 1e-9], 2)[1] > 0
