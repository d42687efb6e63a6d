"""Batch shapes that change during training (issue 38): a ``Schedule`` of steps, concat cutting
the same ids differently (none lost at a change), best fit packing its window's rest again at
a change, and a state at any batch resuming exactly (the packers over a stand-in source)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext import Schedule, StateError
from openwebtext.stream import BestFitBatches
from openwebtext.stream.batches import Batches, batches_start
from openwebtext.stream.schema import BatchesState
from test_stream_packing_runs import PAD, Runs, Vocabulary


def ids_documents(lengths: list[int]) -> list[np.ndarray[Any, Any]]:
    """Documents of ``lengths`` ids, every id of the run distinct (its place in the run)."""
    at = np.cumsum([0, *lengths])
    return [np.arange(a, b, dtype=np.uint32) for a, b in itertools.pairwise(at.tolist())]


@st.composite
def schedules(draw: st.DrawFn, seq_lens: tuple[int, int], sizes: tuple[int, int],
              changes: tuple[int, int], gap: int) -> Schedule:  # fmt: skip
    """A schedule of 1 + ``changes`` steps, each a few batches after the last."""
    n = draw(st.integers(*changes))
    at, steps = 0, []
    for _ in range(n + 1):
        steps.append((at, draw(st.integers(*seq_lens)), draw(st.integers(*sizes))))
        at += draw(st.integers(1, gap))
    return Schedule(steps)


def needed(schedule: Schedule) -> int:
    """Ids that reach one batch past the last change."""
    last = schedule.steps[-1][0] + 1
    return sum(np.prod(schedule.shape(b)) for b in range(last)) + 1


# -- the schedule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "says"),
    [
        ([], "at least one step"),
        ([(1, 64, 2)], "must be at batch 0"),
        ([(0, 64, 2), (5, 128, 1), (5, 256, 1)], "step 2 (5, 256, 1) must come after batch 5"),
        ([(0, 0, 2)], "seq_len must be an int >= 1"),
        ([(0, 64, 2.0)], "batch_size must be an int >= 1"),
        ([(0, 64)], "not (batch_index, seq_len, batch_size)"),
        (["abc"], "not (batch_index, seq_len, batch_size)"),
        ([(0, 64, 2), (-1, 64, 2)], "batch_index must be an int >= 0"),
        ([(0, 64, 2), (9, 2**20, 2**12)], "step 1 (9, 1048576, 4096): a batch of seq_len=1048576"
         " x batch_size=4096 ids is more than the 2147483648 a batch holds"),  # (as fixed sizes)
    ],
)
def test_a_bad_schedule_is_refused_naming_its_step(steps: list[Any], says: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        Schedule(steps)
    assert says in str(caught.value)


def test_a_schedule_takes_the_rows_of_an_array_of_steps() -> None:
    """Red team, session 28: "step 0 is array([0, 8, 2]), not (batch_index, seq_len,
    batch_size)"; numpy's integers in a list of steps are taken as every door takes them."""
    steps = [(0, 8, 2), (10, 16, 2)]
    assert Schedule(np.array(steps)) == Schedule(steps)
    assert Schedule([tuple(np.int64(v) for v in step) for step in steps]) == Schedule(steps)
    assert all(type(v) is int for step in Schedule(np.array(steps)).steps for v in step)


def test_a_schedule_gives_each_batch_its_step_shape() -> None:
    schedule = Schedule([[0, 64, 16], (50, 256, 4), (200, 1024, 1)])
    assert schedule.steps == ((0, 64, 16), (50, 256, 4), (200, 1024, 1))
    shapes = [schedule.shape(b) for b in (0, 49, 50, 199, 200, 10**9)]
    assert shapes == [(64, 16), (64, 16), (256, 4), (256, 4), (1024, 1), (1024, 1)]


def test_warmups_keep_the_ids_of_a_batch() -> None:
    geometric = Schedule.warmup(64, 1024, tokens=16384, batches=100, stages=3, ramp="geometric")
    assert geometric.steps == ((0, 64, 256), (50, 256, 64), (100, 1024, 16))
    doubling = Schedule.warmup(128, 2048, tokens=1 << 15, batches=400, stages=5, ramp="geometric")
    assert [s[1] for s in doubling.steps] == [128, 256, 512, 1024, 2048]
    assert {s[1] * s[2] for s in doubling.steps} == {1 << 15}
    linear = Schedule.warmup(64, 1024, tokens=8192, batches=30, stages=4)
    assert linear.steps == ((0, 64, 128), (10, 384, 21), (20, 704, 11), (30, 1024, 8))
    assert Schedule.warmup(64, 96, tokens=96, batches=3, stages=4).steps == ((0, 64, 1), (3, 96, 1))
    for bad in ({"start": 0}, {"end": 4096}, {"stages": 1}, {"ramp": "cosine"}, {"batches": 1}):
        kwargs: dict[str, Any] = {"start": 64, "end": 1024, "tokens": 2048, "batches": 10}
        with pytest.raises(ValueError):
            Schedule.warmup(**(kwargs | bad))


def test_a_state_is_refused_only_under_another_schedule() -> None:
    documents = ids_documents([50] * 40)
    schedule = Schedule([(0, 8, 2), (3, 16, 1)])
    packer = Batches(Runs(documents, []), Vocabulary(), schedule=schedule)  # type: ignore[arg-type]
    for _ in range(4):
        next(packer)
    state = packer.state_dict()
    assert state["schedule"] == {
        "changes": [{"batch": 3, "seq_len": 16, "batch_size": 1}], "at": 4
    }  # fmt: skip
    assert batches_start(state, Schedule([(0, 8, 2), (3, 16, 1)])) is not None
    for other, says in [
        (Schedule([(0, 8, 2), (4, 16, 1)]),
         "schedule=[(0, 8, 2), (3, 16, 1)]; now schedule=[(0, 8, 2), (4, 16, 1)]"),
        (Schedule([(0, 8, 2)]), "schedule=[(0, 8, 2), (3, 16, 1)]; now seq_len=8, batch_size=2"),
    ]:  # fmt: skip
        with pytest.raises(StateError) as caught:
            batches_start(state, other)
        assert says in str(caught.value)
    huge = {"batch": 3, "seq_len": 2**20, "batch_size": 2**12}
    for damage, field in [({"seq_len": 2**20, "batch_size": 2**12}, "seq_len"),
                          ({"schedule": {"changes": [huge], "at": 4}}, "schedule.changes[0]")]:
        with pytest.raises(StateError, match="more than the 2147483648 a batch holds") as caught:
            batches_start(state | damage, schedule)  # (each size a count: the record takes it)
        assert caught.value.field == field
    fixed = Batches(Runs(documents, []), Vocabulary(), 8, 2)  # type: ignore[arg-type]
    next(fixed)
    saved = fixed.state_dict()
    assert "schedule" not in saved  # fixed sizes: the format as it was
    with pytest.raises(StateError, match="saved for seq_len=8, batch_size=2; now schedule="):
        batches_start(saved, schedule)


def test_both_sizes_and_a_schedule_are_refused() -> None:
    with pytest.raises(ValueError, match="not both"):
        Batches(Runs([], []), Vocabulary(), 8, 2, schedule=Schedule([(0, 8, 2)]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="or a schedule"):
        Batches(Runs([], []), Vocabulary(), 8)  # type: ignore[arg-type]


# -- concat: the same ids, cut differently --------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    schedule=schedules((16, 2048), (1, 16), (1, 6), 3),  # (batches of up to 2**15 ids)
    seed=st.integers(0, 2**32 - 1),
    mean=st.sampled_from([20, 300, 5000]),
    extra=st.integers(0, 5000),
    cut=st.integers(1, 40),
)
def test_concat_under_any_schedule_targets_every_id_once(
    schedule: Schedule, seed: int, mean: int, extra: int, cut: int
) -> None:
    total = needed(schedule) + extra
    lengths = np.random.default_rng(seed).geometric(1 / mean, size=total // mean * 2 + 2)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), total)) + 1]
    lengths = np.append(lengths, max(0, total - int(lengths.sum())))  # at least ``total``
    documents = ids_documents(lengths.tolist())
    ids = np.concatenate(documents)
    packer = Batches(Runs(documents, [cut] * 10**4), Vocabulary(), schedule=schedule,  # type: ignore[arg-type]
                     segments=True)  # fmt: skip
    at, ends = 0, np.cumsum(lengths)
    starts = ends - lengths
    for b, batch in enumerate(packer):
        seq_len, batch_size = schedule.shape(b)
        assert batch.tokens.shape == (batch_size, seq_len + 1)
        # The batch goes on from the last one's last id, whatever the shapes.
        assert (batch.tokens[:, :-1].ravel() == ids[at : at + seq_len * batch_size]).all()
        assert (batch.tokens[:, 1:].ravel() == ids[at + 1 : at + 1 + seq_len * batch_size]).all()
        at += seq_len * batch_size
        document = np.searchsorted(ends, batch.tokens, "right")
        assert (batch.positions == batch.tokens - starts[document]).all()
    # Every id a target once: all but the last few, fewer than the next batch needs.
    seq_len, batch_size = schedule.shape(b + 1)
    assert b >= schedule.steps[-1][0] and len(ids) - at - 1 < seq_len * batch_size


def _cuts(whole: list[Any], most: int = 120) -> set[int]:
    """The batches to cut ``whole`` at: every one of a run of up to ``most``; of a longer one
    (seq_len 1 makes thousands, and each resume reads the rest: quadratic), the first and last
    few, those around each change of shape, and ``most`` spread evenly."""
    n = len(whole)
    if n <= most:
        return set(range(n + 1))
    changes = [k for k in range(1, n) if whole[k][0].shape != whole[k - 1][0].shape]
    around = {c + d for c in changes for d in (-1, 0, 1)}
    return {*range(3), *range(n - 2, n + 1), *around, *range(0, n, n // most)}


def _resumed_equal(make: Any, documents: list[np.ndarray[Any, Any]], first_of: Any) -> int:
    """Cut ``make(source, start)`` at every batch (``_cuts``), resume from its state on the
    documents from the state's document on, and compare the rest with the uninterrupted
    batches."""
    whole = list(make(Runs(documents, [3] * 10**4), None))
    packer = make(Runs(documents, [3] * 10**4), None)
    cuts = _cuts(whole)
    for n in range(len(whole) + 1):
        if n not in cuts:
            next(packer)
            continue
        state = packer.state_dict()
        start = BatchesState.from_json(state)
        first = first_of(state)
        rest = list(make(Runs(documents[first:], [3] * 10**4), start))
        assert len(rest) == len(whole) - n
        for got, want in zip(rest, whole[n:], strict=True):
            assert all((a == b).all() for a, b in zip(got, want, strict=True) if a is not None)
        if n < len(whole):
            next(packer)
    with pytest.raises(StopIteration):  # at the end (after a change, maybe): still a state
        next(packer)
    start = BatchesState.from_json(packer.state_dict())
    assert list(make(Runs(documents[first_of(packer.state_dict()) :], []), start)) == []
    return len(whole)


def _first(state: dict[str, Any]) -> int:
    return int(state["documents"]["position"]["in_block"])


@settings(max_examples=25, deadline=None)
@given(
    schedule=schedules((1, 24), (1, 4), (1, 6), 3),
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=80),
)
def test_concat_under_a_schedule_resumes_at_every_batch(
    schedule: Schedule, lengths: list[int]
) -> None:
    documents = ids_documents(lengths)

    def make(source: Runs, start: BatchesState | None) -> Batches:
        return Batches(source, Vocabulary(), schedule=schedule, segments=True, start=start)  # type: ignore[arg-type]

    _resumed_equal(make, documents, _first)


# -- best fit: the window's rest packed again at a change ------------------------------------


def _best_fit(schedule: Schedule, window: int = 8) -> Any:
    def make(source: Runs, start: BatchesState | None) -> BestFitBatches:
        return BestFitBatches(source, schedule=schedule, seed=1, pad_id=PAD, segments=True,
                              window=window, start=start)  # fmt: skip

    return make


@settings(max_examples=40, deadline=None)
@given(
    schedule=schedules((1, 24), (1, 4), (1, 6), 4),
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=80),
    window=st.integers(1, 12),
)
def test_best_fit_under_a_schedule_resumes_at_every_batch(
    schedule: Schedule, lengths: list[int], window: int
) -> None:
    documents = ids_documents(lengths)
    _resumed_equal(_best_fit(schedule, window), documents, _first)


@settings(max_examples=60, deadline=None)
@given(
    schedule=schedules((1, 24), (1, 4), (1, 6), 4),
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=80),
    window=st.integers(1, 12),
)
def test_best_fit_under_a_schedule_hands_out_each_document_once(
    schedule: Schedule, lengths: list[int], window: int
) -> None:
    """Every id is in one row once, at its position in its document, and a document no
    longer than the rows it went into is whole in one row; rows short of a batch at the end
    of the run are the only ones left out."""
    documents = ids_documents(lengths)
    ids = np.concatenate(documents)
    seen = np.zeros(len(ids), dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    batches = list(_best_fit(schedule, window)(Runs(documents, [5] * 10**4), None))
    for b, batch in enumerate(batches):
        seq_len, batch_size = schedule.shape(b)
        assert batch.tokens.shape == (batch_size, seq_len + 1)
        real = batch.segment_ids > 0
        tokens = batch.tokens[real]
        np.add.at(seen, tokens, 1)
        document = np.searchsorted(np.cumsum(lengths), tokens, "right")
        assert (batch.positions[real] == tokens - starts[document]).all()
        assert (batch.tokens[~real] == PAD).all()
    assert seen.max(initial=0) <= 1
    # What is missing is at most the rows of less than one batch (fewer ids than it holds).
    missing = int((seen == 0).sum())
    if missing:
        seq_len, batch_size = schedule.shape(len(batches))
        assert missing < (seq_len + 1) * batch_size


def handed(batch: Any) -> set[int]:
    """The documents (of the test's) ``batch`` holds ids of."""
    ends = np.cumsum([10, 20, 12, 40, 7, 3, 25, 9])
    return set(np.searchsorted(ends, batch.tokens[batch.segment_ids > 0], "right").tolist())


def test_best_fit_packs_the_rest_of_its_window_again_at_a_change() -> None:
    """A window begun at seq_len 31 goes on at 15 with its rows left packed again: the
    documents not handed out come whole in rows of 16 when they fit, a longer one in pieces
    that go on at their positions; a state there lists the window's packings."""
    documents = ids_documents([10, 20, 12, 40, 7, 3, 25, 9])
    schedule = Schedule([(0, 31, 2), (1, 15, 3)])
    packer = _best_fit(schedule, window=8)(Runs(documents, []), None)
    first = next(packer)
    second = next(packer)
    assert first.tokens.shape == (2, 32) and second.tokens.shape == (3, 16)
    state = packer.state_dict()
    assert state["schedule"]["packings"] == [
        {"seq_len": 31, "rows": 2}, {"seq_len": 15, "rows": 3}
    ]  # fmt: skip
    assert state["row"] == 3 and state["window_number"] == 0
    rest = [second, *packer]
    every = np.concatenate([b.tokens[b.segment_ids > 0] for b in [first, *rest]]).tolist()
    assert len(every) == len(set(every)) and len(every) > 126 - 3 * 16  # < a batch's rows left
    ends = np.cumsum([10, 20, 12, 40, 7, 3, 25, 9])
    for batch in rest:  # a document of at most 16 ids is whole in one row
        for row, segments in zip(batch.tokens, batch.segment_ids, strict=True):
            for s in set(segments.tolist()) - {0}:
                document = np.searchsorted(ends, row[segments == s], "right")
                length = np.diff(ends, prepend=0)[document[0]]
                assert (document == document[0]).all()
                if length <= 16 and row[segments == s].min() >= ends[document[0]] - length:
                    assert (segments == s).sum() == length or document[0] in handed(first)


def test_a_damaged_schedule_section_is_one_error_naming_it() -> None:
    packer = Batches(Runs(ids_documents([50] * 9), []), Vocabulary(),  # type: ignore[arg-type]
                     schedule=Schedule([(0, 8, 2), (3, 16, 1)]))  # fmt: skip
    state = packer.state_dict()
    for section, field in [
        ({"changes": [], "at": 0}, "schedule.changes"),
        ({"changes": [{"batch": 0, "seq_len": 8, "batch_size": 2}], "at": 0}, "schedule.changes"),
        ({"changes": [{"batch": 3, "seq_len": 0, "batch_size": 2}], "at": 0},
         "schedule.changes[0].seq_len"),
        ({"changes": [{"batch": 3, "seq_len": 8, "batch_size": 2}], "at": -1}, "schedule.at"),
        ({"changes": [{"batch": 3, "seq_len": 8, "batch_size": 2}], "at": 0,
          "packings": [{"seq_len": 8, "rows": 2}]}, "schedule"),  # concat has no window
    ]:  # fmt: skip
        with pytest.raises(StateError) as caught:
            BatchesState.from_json(state | {"schedule": section})
        assert caught.value.field == field


@pytest.mark.parametrize("ramp", ["linear", "geometric"])
def test_a_warmup_reaches_its_end_at_its_batches_whatever_its_stages(ramp: str) -> None:
    """``batches`` is the batch the last step (``end``) begins at: with many stages a middle
    one rounded to ``end`` began it early (batch 969 of 1000, linear; 989, geometric)."""
    for batches, stages in ((1000, 100), (100, 10), (40, 41)):
        steps = Schedule.warmup(64, 1024, tokens=4096, batches=batches, stages=stages,
                                ramp=ramp).steps  # fmt: skip
        assert steps[-1] == (batches, 1024, 4)
        assert all(seq_len < 1024 for _, seq_len, _ in steps[:-1])
