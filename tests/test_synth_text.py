"""Tests of the synthetic documents (openwebtext.synth.text): the draws, sizes and how the
text looks next to web text."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

import numpy as np
import pytest

from openwebtext import synth


def test_only_uniform_doubles_are_drawn() -> None:
    class OnlyRandom:
        """A generator that offers nothing but ``random``."""

        def __init__(self, seed: int) -> None:
            self._rng = np.random.Generator(np.random.PCG64(seed))
            self.calls = 0

        def random(self, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return self._rng.random(*args, **kwargs)

    proxy = OnlyRandom(7)
    text = synth.generate_document(proxy)  # type: ignore[arg-type]
    assert proxy.calls > 0
    assert text == synth.generate_document(7)
    assert text != synth.generate_document(8)


def test_generate_document_target_size() -> None:
    for target in (500, 5_000, 50_000):
        n = len(synth.generate_document(3, target_bytes=target).encode())
        assert 0.9 * target < n < 1.1 * target + 600
    capped = [len(synth.generate_document(seed, target_bytes=10**6).encode()) for seed in range(5)]
    assert all(95_000 < n <= 100_000 for n in capped), capped


# --------------------------------------------------------------------------------------
# Text statistics (about 2,000 documents)
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> list[str]:
    docs: list[str] = []
    for member in range(1, 6):
        docs += synth.member_documents(0, 0, member, 400)
    return docs


def test_compression_ratio_like_web_text() -> None:
    text = xz = 0
    for member in (1, 2):
        data, nbytes = synth.pack._make_member(0, 0, member, 390, 0, 6)
        text += nbytes
        xz += len(data)
    ratio = text / xz
    assert 2.5 < ratio < 4.0, ratio
    assert 2.8 < ratio < 3.5, ratio  # tuned to about 3.1 (real OpenWebText: about 3.0)


def test_length_distribution_right_skewed(sample: list[str]) -> None:
    sizes = [len(d.encode()) for d in sample]
    mean = statistics.mean(sizes)
    median = statistics.median(sizes)
    assert len(sizes) == 2000
    assert 4200 < mean < 5200, mean
    assert median < 0.8 * mean, (median, mean)
    assert 2000 < median < 4000, median
    assert min(sizes) >= 300
    assert max(sizes) <= 100_000
    assert max(sizes) > 25_000  # a long tail
    assert sum(s < 1000 for s in sizes) > 0.03 * len(sizes)


def test_some_non_ascii_but_mostly_ascii(sample: list[str]) -> None:
    with_non_ascii = sum(not d.isascii() for d in sample) / len(sample)
    assert 0.2 < with_non_ascii < 0.4, with_non_ascii
    total = sum(len(d.encode()) for d in sample)
    ascii_bytes = sum(sum(c.isascii() for c in d) for d in sample)
    assert ascii_bytes / total > 0.99
    joined = "".join(sample)
    for ch in "“”’—é":
        assert ch in joined, ch
    assert re.search(r"[\u0400-\u04ff\u0370-\u03ff\u4e00-\u9fff]", joined)  # non-Latin


def test_no_control_characters(sample: list[str]) -> None:
    for doc in sample:
        assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", doc)
        assert doc.endswith("\n") and not doc.startswith((" ", "\n"))


def test_looks_like_web_text(sample: list[str]) -> None:
    words = Counter(w.lower().strip('.,!?"“”') for d in sample for w in d.split())
    total = sum(words.values())
    top = words.most_common(100)
    assert top[0][0] == "the"
    assert sum(c for _, c in top) / total > 0.3  # Zipf-like: a few words dominate
    assert len(words) > 10_000  # ... over a large vocabulary
    assert sum(len(w) * c for w, c in words.items()) / total < 8
    n = len(sample)
    # Structure: a title line then paragraphs separated by blank lines.
    assert all("\n\n" in d for d in sample)
    assert sum(d.count("\n\n") >= 3 for d in sample) > 0.7 * n
    assert all(d.split("\n", 1)[0][0].isupper() for d in sample)
    sentences = re.findall(r"[.!?][”\"]? ([A-Z“\"])", "".join(sample))
    assert len(sentences) > 20 * n
    assert sum(d.count(",") for d in sample) > 20 * n
    assert sum(bool(re.search(r"\d", d)) for d in sample) > 0.8 * n
    assert sum("http" in d for d in sample) > 0.1 * n
    assert sum(bool(re.search(r"\b(19|20)\d\d\b", d)) for d in sample) > 0.5 * n
    boilerplate = ("Share this article", "Click here to subscribe", "Advertisement")
    assert sum(any(b in d for b in boilerplate) for d in sample) > 0.1 * n
    assert "lorem" not in " ".join(sample).lower()
