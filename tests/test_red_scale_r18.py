"""What a red team of scaling found (session 40), each pinned as behaviour (speed is
``benchmarks/``'s: ``bench_mixture.py`` keeps the figure of many parts).

- ``Interleave.choose`` looked at every part for every document (~0.1 µs per part: 42 µs a
  document of 400 parts). From ``WIDE`` parts on it does the same arithmetic over arrays: the
  same part every time, ties to the lower index, by documents and by tokens.
- A local ``**`` pattern matched one folder level (``glob`` without ``recursive``), while the
  same pattern as a URL (fsspec) matched every depth: two corpora for one pattern, silently.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext import Corpus
from openwebtext.mixing import WIDE, Interleave


def _turns(weights: list[float], served: list[int], sizes: list[list[float]] | None,
           wide: bool, monkeypatch: pytest.MonkeyPatch) -> list[int]:  # fmt: skip
    monkeypatch.setattr("openwebtext.mixing.WIDE", 1 if wide else 10**9)
    turns = Interleave(weights, served)
    out = []
    for k in range(40):
        size = None if sizes is None else sizes[k % len(sizes)]
        part = turns.choose(size)
        out.append(part)
        if part >= 0:
            turns.take(part, 1 if size is None else int(size[part]))
        if k == 20:
            turns.set_weights(weights[::-1])
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_many_parts_take_the_same_turns_as_few(data: st.DataObject) -> None:
    parts = data.draw(st.integers(2, 90))
    each = st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0, 0.1, 7.0])
    weights = data.draw(st.lists(each, min_size=parts, max_size=parts).filter(any))
    weights = [w / sum(weights) for w in weights]  # (normalised: served within its shares)
    served = [0] * parts
    by_tokens = data.draw(st.booleans())
    sizes = None
    if by_tokens:
        each = st.lists(st.sampled_from([1, 2, 5, 300, math.inf]), min_size=parts,
                        max_size=parts)  # fmt: skip
        sizes = data.draw(st.lists(each, min_size=1, max_size=4))
    with pytest.MonkeyPatch.context() as patch:
        loop = _turns(weights, served, sizes, False, patch)
        wide = _turns(weights, served, sizes, True, patch)
    assert wide == loop


def test_wide_starts_where_the_arrays_pay() -> None:
    assert 16 <= WIDE <= 128


def test_a_local_double_star_pattern_matches_every_depth(tmp_path: Path) -> None:
    for k, sub in enumerate(["", "x", "a/b/c"]):
        folder = tmp_path / sub
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{k}.jsonl").write_text(json.dumps({"text": f"d{k}"}) + "\n")
    names = lambda pattern: sorted(Path(u.path).name for u in Corpus.open(pattern).units)  # noqa: E731
    assert names(f"{tmp_path}/**/*.jsonl") == ["f0.jsonl", "f1.jsonl", "f2.jsonl"]
    assert names(f"file://{tmp_path}/**/*.jsonl") == ["f0.jsonl", "f1.jsonl", "f2.jsonl"]
    assert names(f"{tmp_path}/*/*.jsonl") == ["f1.jsonl"]  # (one level: as before)


def test_a_pattern_that_goes_down_says_no_folder_was_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    for k, folder in enumerate([tmp_path, tmp_path / "sub", tmp_path / "sub" / "deeper"]):
        (folder / f"f{k}.jsonl").write_text(json.dumps({"text": f"d{k}"}) + "\n")
    with caplog.at_level("WARNING", logger="openwebtext"):
        assert len(Corpus.open(f"{tmp_path}/**").units) == 3
    assert "left out" not in caplog.text
    with caplog.at_level("WARNING", logger="openwebtext"):
        assert len(Corpus.open(f"{tmp_path}/*").units) == 1  # (one level: its folders said)
    assert "left out" in caplog.text
