"""The stages that read on a thread of their own (``ahead``, ``to_device``, the priming of
``Loader.batches(...).start()``): an error of their source is never a silent end, and a close
or a Ctrl-C ends them at once even while their thread waits for a stuck worker (before, it
waited for the pool's hang timeout: 60 s by default)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, CorruptMember, Loader, ahead
from openwebtext.stream import Ahead
from support import (
    NumberedBatches,
    child_pids,
    copy_corpus,
    fit_window,
    member_offset,
    wait_until,
)

try:
    from openwebtext.torch import to_device
except ImportError:  # (no torch: the device stage's cases are skipped)
    to_device = None

#: The pool's hang timeout in these tests: before the fix, a close waited this long.
TIMEOUT = 30.0
#: How soon a close (or a Ctrl-C) must end a stage whose worker is stuck.
PROMPT = 8.0
OPTIONS: dict[str, Any] = dict(tokenizer="bytes", seed=0, workers=2, timeout=TIMEOUT)
TESTS = Path(__file__).resolve().parent


def stage_of(kind: str, batches: Any) -> Ahead:
    if kind == "to_device":
        if to_device is None:
            pytest.skip("needs torch")
        return to_device(batches, "cpu")
    if kind == "ahead of start":
        return ahead(batches.start())
    return ahead(batches)


def members(corpus: Path) -> set[str]:
    return {unit.member for unit in Corpus.open(corpus).units}


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("openwebtext-")]


# -- 1. an error of the source: a next() after says so ------------------------------------


@pytest.mark.usefixtures("leaves_nothing_behind")
@pytest.mark.parametrize("kind", ["ahead", "to_device", "ahead of start"])
def test_a_next_after_an_error_of_the_source_says_so_never_a_silent_end(
    kind: str, small_corpus: Path, tmp_path: Path
) -> None:
    corpus = copy_corpus(small_corpus, tmp_path)
    tar = "urlsf_subset00.tar"
    offset, size = member_offset(corpus / tar, "openwebtext/urlsf_subset00-1_data.xz")
    with open(corpus / tar, "r+b") as f:  # the xz data of a member, damaged halfway
        f.seek(offset + size // 2)
        data = f.read(64)
        f.seek(offset + size // 2)
        f.write(bytes(b ^ 0xFF for b in data))
    loader = Loader(corpus, **{**OPTIONS, "timeout": 60.0}, shuffle_buffer=20)
    with stage_of(kind, loader.batches(32, 2)) as stage:
        state = stage.state_dict()
        with pytest.raises(CorruptMember):
            for _ in stage:
                state = stage.state_dict()
        for again in (lambda: next(stage), lambda: list(stage)):
            with pytest.raises(RuntimeError, match=r"failed inside an earlier next\(\) "
                                                   r"\(CorruptMember: "):  # fmt: skip
                again()
        assert stage.state_dict() == state  # the last batch handed out's



def test_a_stage_whose_source_failed_says_so_at_every_next_after() -> None:
    stage = ahead(NumberedBatches(10, fail_at=3))
    assert [int(next(stage)[0, 0]) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(RuntimeError, match="batch 3 is broken"):
        next(stage)
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"earlier next\(\) \(RuntimeError: batch 3 is"):
            next(stage)
    assert stage.state_dict() == {"taken": 3}
    stage.close()
    with pytest.raises(RuntimeError, match="earlier next"):  # closed after: still says so
        next(stage)


def test_a_batch_the_consumer_side_could_not_receive_ends_the_stage() -> None:
    """A batch lost in ``receive`` (the device stage's wait for its copy) ends the stage: a
    next() after never hands out the batch after it, skipping one."""
    calls = 0

    def receive(batch: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("the copy failed")
        return batch

    source = NumberedBatches(10)
    stage = Ahead(source, 2, receive=receive)
    assert int(next(stage)[0, 0]) == 1
    with pytest.raises(OSError, match="the copy failed"):
        next(stage)
    with pytest.raises(RuntimeError, match=r"earlier next\(\) \(OSError: the copy failed\)"):
        next(stage)
    assert stage.state_dict() == {"taken": 1} and source.closed


def test_a_ctrl_c_in_the_wait_for_a_batch_ends_the_stage() -> None:
    """A Ctrl-C that lands in ``next()``'s wait, after the batch was taken off the queue, ends
    the stage as one in its hand-out does (red team, session 28: it left the stage going, and
    the next ``next()`` handed out the batch after the lost one)."""
    source = NumberedBatches(10)
    stage = Ahead(source, 2)
    assert int(next(stage)[0, 0]) == 1
    ready = stage._producer.ready
    get = ready.get

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        get(*args, **kwargs)  # the batch taken, then the signal's handler runs
        raise KeyboardInterrupt

    ready.get = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        next(stage)
    ready.get = get  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match=r"earlier next\(\) \(KeyboardInterrupt\)"):
        next(stage)
    assert stage.state_dict() == {"taken": 1} and source.closed


def test_the_stats_of_a_stage_whose_source_has_none_are_a_clear_absence() -> None:
    stage = ahead(NumberedBatches(3))
    with stage:
        with pytest.raises(AttributeError, match="their source, a NumberedBatches, has none"):
            _ = stage.stats
        next(stage)
        assert not hasattr(stage, "stats")


# -- 2 and 3. a close or a Ctrl-C with a stuck worker ends the stage at once -------------


@pytest.mark.usefixtures("leaves_nothing_behind")
@pytest.mark.parametrize("kind", ["ahead", "to_device", "ahead of start"])
def test_a_close_from_another_thread_ends_a_stage_waiting_on_a_stuck_worker_at_once(
    kind: str, small_corpus: Path, worker_fault: Callable[..., Path]
) -> None:
    """The consumer waits in next() for a batch, the thread for a worker that hangs; another
    thread closes the stage: both return at once, and no thread or worker is left."""
    worker_fault(members(small_corpus), "hang")
    stage = stage_of(kind, Loader(small_corpus, **OPTIONS).batches(32, 2))
    took: dict[str, float] = {}

    def close() -> None:
        time.sleep(1.0)  # (the consumer is in next(), the thread on the workers)
        began = took["began"] = time.monotonic()
        stage.close()
        took["close"] = time.monotonic() - began

    closer = threading.Thread(target=close, daemon=True)
    closer.start()
    with pytest.raises(StopIteration):
        next(stage)
    woke = time.monotonic() - took["began"]
    closer.join(TIMEOUT + 30)
    assert woke < PROMPT and took["close"] < PROMPT, (woke, took)
    assert stage_threads() == [] and child_pids() == []


@pytest.mark.usefixtures("leaves_nothing_behind")
@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_closing_a_started_iterator_whose_worker_is_stuck_ends_at_once(
    packing: str, small_corpus: Path, worker_fault: Callable[..., Path]
) -> None:
    worker_fault(members(small_corpus), "hang")
    window = fit_window(packing, 8)
    batches = Loader(small_corpus, **OPTIONS).batches(32, 2, packing=packing, window=window)
    state = batches.state_dict()
    batches.start()
    assert wait_until(lambda: len(child_pids()) == 2, 10)
    time.sleep(0.5)  # (the start thread waits on the workers)
    began = time.monotonic()
    batches.close()
    assert time.monotonic() - began < PROMPT
    assert stage_threads() == [] and child_pids() == []
    assert batches.state_dict() == state  # nothing was handed out
    with pytest.raises(StopIteration):
        next(batches)


CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from support import fault_on
import openwebtext as o
from openwebtext.engine import Reader

corpus, how = sys.argv[2], sys.argv[3]
Reader.read = fault_on({u.member for u in o.Corpus.open(corpus).units}, "hang")
loader = o.Loader(corpus, tokenizer="bytes", seed=0, workers=2, timeout=float(sys.argv[4]))
batches = loader.batches(32, 2, packing="bestfit", window=8)
with (o.ahead(batches) if how == "ahead" else batches) as stage:
    stage.start()                       # the workers start on the stage's thread
    time.sleep(1.0)                     # it waits on them now
    print("READY", flush=True)
    if how == "ahead":
        next(stage)                     # the consumer waits for a batch
    else:
        time.sleep(100)                 # the model loads
"""


@pytest.mark.parametrize("how", ["ahead", "start"])
def test_ctrl_c_while_a_stage_thread_waits_on_a_stuck_worker_ends_the_program_at_once(
    how: str, small_corpus: Path
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(TESTS), str(small_corpus), how, str(TIMEOUT)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as child:  # fmt: skip
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "READY", child.communicate()
            began = time.monotonic()
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=TIMEOUT + 30)
            took = time.monotonic() - began
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert took < PROMPT, f"the program ended {took:.1f} s after its Ctrl-C"
    assert child.returncode == -signal.SIGINT, err
