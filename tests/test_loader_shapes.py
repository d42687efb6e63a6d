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
        assert all((x == y).all() for x, y in zip(a, b, strict=True))


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
            assert all((x[0] == y[0]).all() for x, y in zip(whole[0], going_on[rank], strict=True))
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
