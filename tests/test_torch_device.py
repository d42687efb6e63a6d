"""Issue 37: the device stage (``to_device``): the batches of ``Loader.batches`` as tensors, in
order, made ahead on a thread, with the state of the batch handed out (not of the read-ahead);
``start()`` before the first batch. On a CPU here; the CUDA paths (pinned ring, side stream)
in the tests marked ``cuda``, skipped without a CUDA device."""

from __future__ import annotations

import gc
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext import Loader, ahead  # noqa: E402
from openwebtext.torch import DeviceBatches, PackedBatchDataset, to_device  # noqa: E402
from resumable import check_save_load  # noqa: E402
from support import NumberedBatches, fit_window, stateful_items  # noqa: E402

S, B = 256, 4  # a few hundred batches a pass of the small corpus
OPTIONS: dict[str, Any] = dict(tokenizer="bytes", seed=3, shuffle_buffer=30, workers=1)
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device: the pinned ring and side stream")
PACKINGS = [("concat", False), ("concat", True), ("bestfit", False), ("bestfit", True)]


def as_lists(batch: Any) -> Any:
    """A batch as plain lists: a tensor, a dict of them, an array or a ``PackedBatch``."""
    if isinstance(batch, dict):
        return {name: as_lists(t) for name, t in batch.items()}
    if isinstance(batch, tuple):  # a PackedBatch of arrays
        return {name: a.tolist() for name, a in batch._asdict().items() if a is not None}
    return batch.tolist()


def plain(corpus: Path, packing: str, segments: bool, **extra: Any) -> Any:
    return Loader(corpus, **OPTIONS, **extra).batches(
        S, B, packing=packing, segments=segments, window=fit_window(packing, 20)
    )


def wait_ready(stage: DeviceBatches, n: int) -> None:
    """Until ``n`` batches are made ahead (a deadline only so that a bug fails, not hangs)."""
    deadline = time.monotonic() + 60
    while stage.ready < n:
        assert time.monotonic() < deadline, f"{stage.ready} of {n} batches made ahead"
        time.sleep(0.01)


@pytest.mark.parametrize(("packing", "segments"), PACKINGS)
def test_the_device_stage_hands_out_the_plain_batches_in_order(
    small_corpus: Path, packing: str, segments: bool
) -> None:
    want = [as_lists(b) for b in plain(small_corpus, packing, segments)]
    with to_device(plain(small_corpus, packing, segments), "cpu", depth=2) as stage:
        got = [as_lists(b) for b in stage]
        state, stats = stage.state_dict(), stage.stats
    assert got == want and len(want) > 3
    with plain(small_corpus, packing, segments) as batches:
        for _ in batches:
            pass
        assert state == batches.state_dict()  # after the last batch: the plain one's end
        assert stats == batches.stats  # the source's counts, the whole pass read


def tensors(batch: Any) -> list[Any]:
    return list(batch.values()) if isinstance(batch, dict) else [batch]


@pytest.mark.parametrize(("packing", "segments"), [("concat", False), ("bestfit", True)])
def test_the_batches_are_tensors_of_the_arrays_dtype(
    small_corpus: Path, packing: str, segments: bool
) -> None:
    with to_device(plain(small_corpus, packing, segments), "cpu") as stage:
        batch = next(stage)
    if segments:
        assert set(batch) == {"tokens", "segment_ids", "positions"}
        assert batch["segment_ids"].dtype == torch.int32
    for t in tensors(batch):
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.shape == (B, S + 1)
    assert tensors(batch)[0].dtype == torch.int64


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_state_saved_mid_prefetch_is_the_batchs_and_resumes_exactly(
    small_corpus: Path, packing: str
) -> None:
    depth, k = 3, 2
    with plain(small_corpus, packing, True) as batches:
        whole = [as_lists(b) for b in batches]
    with plain(small_corpus, packing, True) as batches:
        for _ in range(k):
            next(batches)
        after_k = batches.state_dict()
    stage = to_device(plain(small_corpus, packing, True), "cpu", depth=depth)
    head = [as_lists(next(stage)) for _ in range(k)]
    wait_ready(stage, depth)  # the thread has read `depth` batches past the k handed out
    state = json.loads(json.dumps(stage.state_dict()))
    stage.close()
    assert head == whole[:k]
    assert state == after_k
    with to_device(
        Loader(small_corpus, **OPTIONS).batches(
            S, B, packing=packing, segments=True, window=fit_window(packing, 20), state=state
        ),
        "cpu",
        depth=depth,
    ) as resumed:
        assert head + [as_lists(b) for b in resumed] == whole


@pytest.mark.slow  # (~13 s: every cut of two epochs; a state mid-prefetch resumes just above)
def test_the_device_stage_resumes_from_any_state(small_corpus: Path) -> None:
    def start(state: dict[str, Any] | None, epochs: int) -> DeviceBatches:
        batches = Loader(small_corpus, **OPTIONS, epochs=epochs).batches(
            S, B, packing="bestfit", segments=True, window=20, state=state
        )
        return to_device(batches, "cpu", depth=2)

    check_save_load(start, key=as_lists)


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_ahead_hands_out_each_batch_with_its_own_state(small_corpus: Path, packing: str) -> None:
    """``ahead`` (the device stage's thread, without torch): the arrays themselves, and after
    each the state and the ``stats`` the plain batches have after it, whatever the thread read
    ahead (its stats were the source's live ones: the batches made ahead counted)."""
    with plain(small_corpus, packing, True) as batches:
        want = [(as_lists(b), batches.state_dict(), batches.stats) for b in batches]
    with ahead(plain(small_corpus, packing, True), depth=3) as made:
        made.start()
        wait_ready(made, 3)
        got = []
        for batch in made:
            assert type(batch).__name__ == "PackedBatch"
            wait_ready(made, min(3, len(want) - len(got) - 1))  # (made ahead: not counted)
            got.append((as_lists(batch), made.state_dict(), made.stats))
    assert got == want


def test_start_fills_the_queue_and_changes_nothing(small_corpus: Path) -> None:
    want = [as_lists(b) for b in plain(small_corpus, "bestfit", True)]
    with plain(small_corpus, "bestfit", True) as fresh:
        initial = fresh.state_dict()
    stage = to_device(plain(small_corpus, "bestfit", True), "cpu", depth=2)
    assert stage.start() is stage
    stage.start()  # again: nothing more
    wait_ready(stage, 2)
    assert stage.state_dict() == initial  # nothing handed out: the state at the start
    stage.start()
    got = [as_lists(b) for b in stage]
    stage.start()  # after the end: still nothing
    assert got == want
    with pytest.raises(StopIteration):
        next(stage)



def test_an_error_of_the_source_is_raised_to_the_consumer_after_the_batches_before_it() -> None:
    source = NumberedBatches(10, fail_at=3)
    stage = to_device(source, "cpu")
    got = [int(next(stage)[0, 0]) for _ in range(3)]
    with pytest.raises(RuntimeError, match="batch 3 is broken"):
        next(stage)
    assert got == [1, 2, 3] and source.closed
    assert stage.state_dict() == {"taken": 3}
    with pytest.raises(RuntimeError, match=r"failed inside an earlier next\(\) \(RuntimeError: "
                       "batch 3 is broken"):  # never a silent end  # fmt: skip
        next(stage)


def test_close_stops_the_thread_and_closes_the_source_at_once() -> None:
    source = NumberedBatches(10**9)
    stage = to_device(source, "cpu", depth=2)
    next(stage)
    wait_ready(stage, 2)
    stage.close()
    stage.close()
    assert source.closed and source.taken <= 1 + 2 + 1  # handed, queued, the one held
    assert stage.state_dict() == {"taken": 1}
    with pytest.raises(StopIteration):
        next(stage)
    unstarted = NumberedBatches(5)
    to_device(unstarted, "cpu").close()
    assert unstarted.closed and unstarted.taken == 0


class Slow(NumberedBatches):
    """Batches made a quarter second each, of the value of the weights last set."""

    weights = 0

    def __iter__(self) -> Iterator[np.ndarray[Any, Any]]:
        self.closed = False
        while True:
            time.sleep(0.25)
            self.taken += 1
            yield np.full((2, 3), self.weights)

    def set_weights(self, weights: dict[str, float], state: Any = None) -> None:
        self.weights = int(weights["a"])


@pytest.mark.parametrize("how", ["close", "set_weights"])
def test_a_consumer_waiting_in_next_wakes_when_another_thread_closes_or_changes(
    how: str,
) -> None:
    """``next()`` waiting for a batch, another thread closes the stage (the wait ends:
    StopIteration) or changes its weights (the wait goes on with the new producer: the batch
    is the change's). Before, the waiter stayed on the stopped producer's queue for ever."""
    stage = ahead(Slow(10**9), 2)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(next(stage, "ended")), daemon=True)
    waiter.start()
    time.sleep(0.05)  # (the waiter is in next(): the first batch takes 0.25 s)
    if how == "close":
        stage.close()
    else:
        stage.set_weights({"a": 7})
    waiter.join(30)
    alive = waiter.is_alive()
    stage.close()
    assert not alive
    assert got == ["ended"] if how == "close" else int(got[0][0, 0]) == 7


def test_an_abandoned_stage_stops_its_thread_and_closes_its_source() -> None:
    source = NumberedBatches(10**9)
    stage = to_device(source, "cpu", depth=2)
    next(stage)
    thread = stage._producer.thread
    del stage
    gc.collect()
    thread.join(60)
    assert not thread.is_alive() and source.closed


def test_what_the_stage_refuses() -> None:
    with pytest.raises(ValueError, match="depth must be an int >= 1, not 0"):
        to_device(NumberedBatches(1), "cpu", depth=0)
    with pytest.raises(TypeError, match="need a state_dict"):
        to_device([np.zeros(3)], "cpu")
    with to_device(stateful_items([["not", "arrays"]]), "cpu") as stage, pytest.raises(TypeError):
        next(stage)


def test_a_stateful_dataloader_through_the_stage(indexed: Path) -> None:
    dataset = PackedBatchDataset(indexed, S, B, segments=True, packing="bestfit", window=20,
                                 **OPTIONS)  # fmt: skip
    loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
    want = [as_lists(b) for b in loader]
    loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
    with to_device(loader, "cpu") as stage:
        head = [as_lists(next(stage)) for _ in range(2)]
        state = stage.state_dict()
    assert head == want[:2]
    resumed = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
    resumed.load_state_dict(state)
    with to_device(resumed, "cpu") as stage:
        assert head + [as_lists(b) for b in stage] == want


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(("packing", "segments"), [("concat", False), ("bestfit", True)])
@pytest.mark.parametrize("depth", [1, 3])
def test_on_cuda_the_batches_are_the_plain_ones_on_the_device(
    small_corpus: Path, packing: str, segments: bool, depth: int
) -> None:
    want = [as_lists(b) for b in plain(small_corpus, packing, segments, epochs=3)]
    side = torch.cuda.Stream()  # the consumer on a stream of its own: it waits on the event
    got = []
    with (
        torch.cuda.stream(side),
        to_device(plain(small_corpus, packing, segments, epochs=3), "cuda", depth=depth) as stage,
    ):
        for batch in stage:
            for t in tensors(batch):
                assert t.device.type == "cuda"
            got.append(as_lists(batch))  # .tolist() on the consumer's stream
    assert got == want


@pytest.mark.cuda
@needs_cuda
def test_on_cuda_a_slow_side_stream_sees_every_batch_intact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The side stream made slow (a sleep queued on it before each batch's copy): the thread
    comes round the ring of pinned slots long before the copies that read them have run, and
    only ``Slot.fill``'s wait on the copy's event keeps a slot from being written again first.
    Without it a batch holds a later batch's numbers. (A slow consumer, as before, slowed no
    copy: it passed without the wait.)"""
    from openwebtext.torch.feed import Mover

    move = Mover.move

    def slow_move(self: Any, batch: Any) -> Any:
        assert self.stream is not None
        with torch.cuda.stream(self.stream):
            torch.cuda._sleep(200_000_000)  # (GPU cycles: about 0.1 s before this copy runs)
        return move(self, batch)

    monkeypatch.setattr(Mover, "move", slow_move)

    class Numbered:
        def __iter__(self) -> Iterator[np.ndarray[Any, Any]]:
            for k in range(16):
                yield np.full(1 << 20, k, dtype=np.int64)

        def state_dict(self) -> dict[str, Any]:
            return {}

    with to_device(Numbered(), "cuda", depth=2) as stage:
        seen = [(int(batch.min()), int(batch.max())) for batch in stage]
    assert seen == [(k, k) for k in range(16)]


@pytest.mark.slow  # trains a tiny model twice: with the examples, in CI's slow step
def test_the_gpu_feed_benchmark_runs_its_smoke_mode_on_a_cpu(small_corpus: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu_feed.py"
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script), str(small_corpus), "--smoke"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1  # one JSON line, the progress on stderr
    report = json.loads(lines[0])
    assert report["device"] == "cpu" and report["timer"] == "perf_counter"
    for feed in ("plain", "stage"):
        assert report[feed]["tokens_per_s"] > 0
        assert 0 <= report[feed]["data_wait_share"] <= 1
    # The same batches in the same order: the two feeds train the same model to the same loss.
    assert report["plain"]["mean_loss"] == report["stage"]["mean_loss"]
    assert report["first_batch_ms"]["cold"] > 0 and report["first_batch_ms"]["started"] > 0


@pytest.mark.parametrize(
    "device", ["gpu", "", -1, "cuda:64", *(() if torch.cuda.is_available() else ("cuda",))]
)
def test_a_device_torch_cannot_copy_to_is_a_value_error_naming_it(
    small_corpus: Path, device: Any
) -> None:
    """torch's own RuntimeError (``"gpu"``, ``""``, ``-1``, an index past the devices) or
    AssertionError (``"cuda"`` without CUDA) came out of ``to_device``, naming no argument."""
    with pytest.raises(ValueError, match=rf"device {re.escape(repr(device))} is not one torch "
                       "can copy batches to here: .+") as caught:  # fmt: skip
        to_device(plain(small_corpus, "concat", False), device)
    assert "\n" not in str(caught.value)
