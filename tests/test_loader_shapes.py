"""A sequence-length warm-up end to end (issue 38): ``Loader.batches(schedule=…)`` on the
generated corpus with 2 workers, stopped at each change and resumed, or resharded to another
world size there, gives the uninterrupted batches; the PyTorch dataset and the device stage
take the schedule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Schedule, StateError, reshard
from resumable import check_save_load
from support import fit_window

#: 64 -> 256 -> 1024 ids a row, 1024 ids a batch: changes at batches 4 and 8.
WARMUP = Schedule.warmup(64, 1024, tokens=1024, batches=8, stages=3, ramp="geometric")


def test_the_warmup_is_64_256_1024() -> None:
    assert WARMUP.steps == ((0, 64, 16), (4, 256, 4), (8, 1024, 1))


def _batches(loader: Loader, state: dict[str, Any] | None, n: int | None = None,
             **kwargs: Any) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """Up to ``n`` batches (as tuples of arrays) and the state after them, through JSON."""
    out: list[Any] = []
    with loader.batches(schedule=WARMUP, state=state, **kwargs) as batches:
        for batch in batches if n != 0 else ():
            out.append(tuple(batch) if isinstance(batch, tuple) else (batch,))
            if len(out) == n:
                break
        return out, json.loads(json.dumps(batches.state_dict()))


def _same(got: list[Any], want: list[Any]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert all((x == y).all() for x, y in zip(a, b, strict=True) if x is not None)


@pytest.mark.parametrize(
    "kwargs", [{}, {"segments": True}, {"packing": "bestfit", "window": 6, "segments": True}]
)
def test_a_warmup_stopped_at_each_change_resumes_exactly(
    indexed: Path, kwargs: dict[str, Any]
) -> None:
    loader = Loader(indexed, workers=2, seed=0, tokenizer="bytes", shuffle_buffer=40)
    whole, _ = _batches(loader, None, **kwargs)
    assert len(whole) > 10  # past both changes
    assert [b[0].shape for b in whole[3:5]] == [(16, 65), (4, 257)]
    assert [b[0].shape for b in whole[7:9]] == [(4, 257), (1, 1025)]
    for stop in (4, 5, 8):
        first, state = _batches(loader, None, stop, **kwargs)
        assert state["schedule"]["at"] == stop
        rest, _ = _batches(loader, state, **kwargs)
        _same(first + rest, whole)
    with pytest.raises(StateError, match="saved for schedule="):
        loader.batches(64, 16, state=state, **kwargs)


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_warmup_resharded_at_the_change_goes_on_in_its_schedule(
    indexed: Path, packing: str
) -> None:
    """Two ranks stop at the change (best fit: a batch after it, inside windows packed again
    at the new length); their states resharded to three ranks go on from batch 4 of the
    schedule, each resuming exactly at its own next change."""
    kwargs: dict[str, Any] = {"segments": True, "packing": packing}
    if packing == "bestfit":
        kwargs["window"] = 6
    stop = 4 if packing == "concat" else 5

    def loader(rank: int, world: int) -> Loader:
        return Loader(indexed, workers=2, seed=0, tokenizer="bytes", shuffle_buffer=40,
                      rank=rank, world_size=world, even="drop")  # fmt: skip

    states = [_batches(loader(r, 2), None, stop, **kwargs)[1] for r in range(2)]
    # What the old ranks would have handed out next: new rank r starts with old rank r's rest.
    going_on = [_batches(loader(r, 2), None, stop + 1, **kwargs)[0][-1] for r in range(2)]
    if packing == "bestfit":  # the old ranks' windows were packed again at the change
        assert all(s["schedule"].get("packings", [])[:1] for s in states if s["row"])
    new = reshard(states, 3)
    for rank, state in enumerate(new):
        assert state["schedule"]["at"] == stop and state["seq_len"] == 64
        whole, _ = _batches(loader(rank, 3), state, **kwargs)
        assert whole and whole[0][0].shape == (4, 257)
        # Its first row: old rank 0's next for new rank 0 (the rest begins with its rest); with
        # best fit old rank r's next for new rank r (the windows they were in, dealt round robin).
        if rank == 0 or (packing == "bestfit" and rank < 2):
            pairs = zip(whole[0], going_on[rank], strict=True)
            assert all((x[0] == y[0]).all() for x, y in pairs if x is not None)
        first, saved = _batches(loader(rank, 3), state, 8 - stop, **kwargs)
        assert saved["schedule"]["at"] == 8
        rest, _ = _batches(loader(rank, 3), saved, **kwargs)
        _same(first + rest, whole)


def test_a_fixed_and_a_scheduled_state_are_not_resharded_together(indexed: Path) -> None:
    fixed = Loader(indexed, seed=0, tokenizer="bytes", rank=0, world_size=2, even="drop")
    scheduled = Loader(indexed, seed=0, tokenizer="bytes", rank=1, world_size=2, even="drop")
    with fixed.batches(64, 16) as a, scheduled.batches(schedule=WARMUP) as b:
        next(a), next(b)
        states = [a.state_dict(), b.state_dict()]
    with pytest.raises(StateError, match="different schedules"):
        reshard(states, 3)


def test_the_torch_dataset_and_device_stage_take_a_schedule(indexed: Path) -> None:
    torch = pytest.importorskip("torch")
    from openwebtext.torch import PackedBatchDataset, to_device

    dataset = PackedBatchDataset(indexed, schedule=WARMUP, tokenizer="bytes", seed=0)
    shapes = [tuple(b.shape) for _, b in zip(range(10), dataset, strict=False)]
    assert shapes == [(16, 65)] * 4 + [(4, 257)] * 4 + [(1, 1025)] * 2
    with pytest.raises(ValueError, match="not both"):
        PackedBatchDataset(indexed, 64, 16, schedule=WARMUP, tokenizer="bytes")
    loader = Loader(indexed, seed=0, tokenizer="bytes")
    with to_device(loader.batches(schedule=WARMUP, segments=True), "cpu") as moved:
        got = [b for _, b in zip(range(9), moved, strict=False)]
        state = moved.state_dict()
    assert [tuple(b["tokens"].shape) for b in got[3:]] == [(16, 65)] + [(4, 257)] * 4 + [(1, 1025)]
    assert isinstance(got[-1]["positions"], torch.Tensor)
    with loader.batches(schedule=WARMUP, state=state, segments=True) as batches:
        resumed = next(batches)
    with loader.batches(schedule=WARMUP, segments=True) as batches:
        tenth = [b for _, b in zip(range(10), batches, strict=False)][-1]
    assert np.array_equal(resumed.tokens, tenth.tokens)


def _documents(corpus: Path) -> tuple[dict[tuple[int, bytes], list[str]], dict[str, bytes]]:
    """Every document's ids (as bytes, ``tokenizer="bytes"``), and where a piece can be
    looked up: ``(position, its first 8 ids)`` at every position of every document."""
    with Loader(corpus, tokenizer="bytes", shuffle=False).iter() as docs:
        ids = {doc.name: doc.tokens.astype(np.uint8).tobytes() for doc in docs}
    at: dict[tuple[int, bytes], list[str]] = {}
    for name, data in ids.items():
        for p in range(len(data)):
            at.setdefault((p, data[p : p + 8]), []).append(name)
    return at, ids


def test_a_window_dealt_by_an_old_rank_resumes_after_a_change(indexed: Path) -> None:
    """Old ranks stop inside windows at 127 ids a row; each new rank packs the window it was
    dealt at 127, then again at 63 at the change: a state there resumes exactly."""
    schedule = Schedule([(0, 127, 2), (2, 63, 3)])

    def run(rank: int, world: int, state: Any, n: int | None) -> tuple[list[Any], Any]:
        loader = Loader(indexed, tokenizer="bytes", seed=5, shuffle_buffer=30, rank=rank,
                        world_size=world, even="drop")  # fmt: skip
        with loader.batches(schedule=schedule, state=state, segments=True, packing="bestfit",
                            window=5) as batches:  # fmt: skip
            out = [tuple(b) for _, b in zip(range(n or 10**9), batches, strict=False)]
            return out, json.loads(json.dumps(batches.state_dict()))

    old = [run(r, 4, None, 1)[1] for r in range(4)]
    for r, state in enumerate(reshard(old, 3)):
        first, saved = run(r, 3, state, 3)
        assert len(saved["schedule"]["packings"]) == 2  # inside the dealt window, packed again
        _same(first + run(r, 3, saved, None)[0], run(r, 3, state, None)[0])


@pytest.mark.slow  # every id of the epoch looked up: ~15 s
def test_best_fit_resharded_twice_across_changes_hands_out_every_id_once(indexed: Path) -> None:
    """Four best-fit ranks stop before, at and past a change (inside windows packed again),
    are resharded to three, which go on across the next change, then to two, which run to
    the end of the epoch: every id of every document handed out once, but for the documents
    ``drop`` leaves out whole and the rows each last rank cannot fill."""
    schedule = Schedule([(0, 127, 2), (2, 63, 3), (5, 255, 1)])
    at, ids = _documents(indexed)
    seen = {name: np.zeros(len(data), dtype=np.int64) for name, data in ids.items()}

    def run(
        rank: int, world: int, state: Any, n: int | None, count: bool = True
    ) -> tuple[list[Any], dict[str, Any]]:
        loader = Loader(indexed, tokenizer="bytes", seed=5, shuffle_buffer=30, rank=rank,
                        world_size=world, even="drop")  # fmt: skip
        out = []
        with loader.batches(schedule=schedule, state=state, segments=True, packing="bestfit",
                            window=5) as batches:  # fmt: skip
            for k, batch in enumerate(batches if n != 0 else (), 1):
                out.append(tuple(batch))
                if not count:
                    continue
                for tokens, segments, positions in zip(*batch[:3], strict=True):
                    for s in set(segments.tolist()) - {0}:
                        where = np.flatnonzero(segments == s)
                        p, piece = int(positions[where[0]]), tokens[where].astype(np.uint8)
                        data = piece.tobytes()
                        # A short piece may be in several documents: the first not seen there.
                        names = [n for n in at[(p, data[:8])] if ids[n][p:].startswith(data)]
                        fresh = [n for n in names if not seen[n][p : p + len(data)].any()]
                        name = (fresh or names)[0]
                        seen[name][p : p + len(data)] += 1
                if k == n:
                    break
            return out, json.loads(json.dumps(batches.state_dict()))

    old = [run(r, 4, None, stop)[1] for r, stop in enumerate((1, 2, 3, 4))]
    assert any(s["schedule"].get("packings", [])[1:] for s in old), "no window packed again"
    three = []
    for r, state in enumerate(reshard(old, 3)):
        first, saved = run(r, 3, state, 2)
        three.append(saved)
        # Resumed inside a window dealt by an old rank, packed again at the change: the same.
        _same(first + run(r, 3, saved, None, count=False)[0], run(r, 3, state, None, False)[0])
    assert {s["schedule"]["at"] for s in three} == {6}
    for r, state in enumerate(reshard(three, 2)):
        run(r, 2, state, None)
    counts = np.concatenate([c for c in seen.values() if c.any()])  # drop: some left out whole
    assert counts.max() == 1
    assert (counts == 0).sum() < 2 * 256  # the row each last rank cannot fill


@pytest.mark.slow  # two epochs read ~25 times: ~20 s each
@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_scheduled_run_passes_the_resume_checker(indexed: Path, packing: str) -> None:
    """The one resume checker (``resumable``): cut anywhere over two epochs (a change in each),
    at an epoch's end, resumed twice in a row; the same batches and the same final state."""
    schedule = Schedule([(0, 1024, 4), (60, 512, 8), (190, 2048, 4)])

    def start(state: dict[str, Any] | None, epochs: int) -> Any:
        loader = Loader(indexed, tokenizer="bytes", seed=2, shuffle_buffer=30, epochs=epochs)
        window = fit_window(packing, 40)
        return loader.batches(schedule=schedule, state=state, packing=packing, window=window)

    def cuts(first: int, whole: int) -> list[int]:  # around the changes and the epoch's end
        return [0, 59, 60, 61, first - 1, first, 190, whole]

    whole = check_save_load(start, key=lambda batch: (batch.shape, batch.tobytes()), cuts=cuts)
    assert len(whole) > 190  # both changes, one in each epoch
