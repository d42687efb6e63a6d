"""Exact resume: any cut, any worker count, across blocks and epochs; states are checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openwebtext import Loader, StateError


def run(
    loader: Loader, state: dict[str, Any] | None = None, n: int | None = None
) -> tuple[list[str], dict[str, Any]]:
    """Up to ``n`` document names from ``loader`` (resumed from ``state``), and the state after."""
    with loader.iter(state=state) as it:
        names = []
        for doc in it:
            names.append(doc.name)
            if n is not None and len(names) == n:
                break
        # The state must survive JSON, as it would in a checkpoint file.
        return names, json.loads(json.dumps(it.state_dict()))


def check_resume(loader: Loader, cuts: list[int], workers_after: int | None = None) -> None:
    """The shared resume checker: stop at each cut, resume, compare with the whole stream."""
    full, _ = run(loader)
    got: list[str] = []
    state = None
    resumed = loader if workers_after is None else loader.replace(workers=workers_after)
    for cut in sorted(cuts):
        names, state = run(resumed if state else loader, state, max(0, cut - len(got)) or None)
        got += names
        if len(got) >= len(full):
            break
    rest, _ = run(resumed, state)
    assert got + rest == full


def test_resume_at_every_position_small(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=2, seed=1, shuffle_buffer=30)
    full, _ = run(loader)
    for cut in range(0, len(full) + 1, 7):
        head, state = run(loader, n=cut) if cut else ([], None)
        rest, _ = run(loader, state)
        assert head + rest == full, cut


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cuts=st.lists(st.integers(1, 240), min_size=1, max_size=3),
    workers=st.sampled_from([0, 1, 3]),
    workers_after=st.sampled_from([0, 2]),
    shuffle_buffer=st.sampled_from([0, 1, 25, 70, 1000]),
    epoch=st.integers(0, 3),
    shuffle=st.booleans(),
)
def test_resume_equals_uninterrupted(
    small_corpus: Path,
    cuts: list[int],
    workers: int,
    workers_after: int,
    shuffle_buffer: int,
    epoch: int,
    shuffle: bool,
) -> None:
    loader = Loader(
        small_corpus,
        workers=workers,
        seed=11,
        shuffle=shuffle,
        shuffle_buffer=shuffle_buffer,
        epoch=epoch,
        epochs=2,
    )
    check_resume(loader, cuts, workers_after)


def test_two_epochs_differ_and_cover(small_corpus: Path, small_docs: dict[str, str]) -> None:
    both, _ = run(Loader(small_corpus, seed=2, epochs=2))
    first, second = both[:120], both[120:]
    assert sorted(first) == sorted(second) == sorted(small_docs)
    assert first != second
    assert run(Loader(small_corpus, seed=2, epoch=1))[0] == second


def test_endless_epochs(small_corpus: Path) -> None:
    names, state = run(Loader(small_corpus, seed=2, epochs=None), n=1000)
    assert len(names) == 1000
    assert state["position"]["epoch"] == 8  # 1000 // 120


def test_resume_does_not_reread_finished_units(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=1, seed=4, shuffle_buffer=30)
    _, state = run(loader, n=100)
    assert state["position"] == {"epoch": 0, "block": 4, "in_block": 20}
    with loader.iter(state=state) as it:
        rest = list(it)
        # Blocks are 2 units (40 documents >= 30): only the cut block's units 4 and 5 are read.
        assert it.stats.units - state["counters"]["units"] == 2
    assert len(rest) == 20


def test_state_is_small_versioned_json(small_corpus: Path) -> None:
    _, state = run(Loader(small_corpus, seed=4), n=10)
    assert state["format"] == "openwebtext-state/1"
    assert len(json.dumps(state)) < 2000
    assert state["counters"]["documents"] == 10


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"seed": 5}, "seed"),
        ({"shuffle_buffer": 10}, "shuffle_buffer"),
        ({"world_size": 2, "even": False}, "world_size"),
        ({"split": "train"}, "split"),
    ],
)
def test_resume_with_other_options_is_refused(
    small_corpus: Path, change: dict[str, Any], field: str
) -> None:
    loader = Loader(small_corpus, seed=4)
    _, state = run(loader, n=10)
    with pytest.raises(StateError, match=rf"{field}: saved .*, now"):
        loader.replace(**change).iter(state=state)


def test_resume_with_other_corpus_is_refused(small_corpus: Path, tmp_path: Path) -> None:
    from openwebtext.synth import write_corpus

    write_corpus(tmp_path / "other", subsets=1, members=2, docs=5, seed=9, workers=1)
    _, state = run(Loader(small_corpus), n=3)
    with pytest.raises(StateError, match="corpus: saved"):
        Loader(tmp_path / "other").iter(state=state)
    with pytest.raises(StateError, match="not an openwebtext state"):
        Loader(small_corpus).iter(state={"position": 3})


def test_changing_only_workers_gives_the_same_stream(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=1, seed=6, shuffle_buffer=40)
    head, state = run(loader, n=50)
    rest, _ = run(loader.replace(workers=4, prefetch=1), state)
    assert head + rest == run(loader)[0]


def test_a_mark_expands_later_to_the_state_of_its_moment(small_corpus: Path) -> None:
    """``mark()`` is cheap; ``state_dict(mark)`` must equal the state taken when it was made."""
    with Loader(small_corpus, workers=2, seed=6, shuffle_buffer=30).iter() as it:
        taken = []
        for _ in range(70):  # across block boundaries (blocks of 40 documents here)
            taken.append((it.mark(), it.state_dict()))
            next(it)
        for mark, state in taken:
            assert it.state_dict(mark) == state
        assert taken[0][1]["position"] != taken[45][1]["position"]
