"""What a red team of exits and closes (session 33) found: a close from another thread."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader
from openwebtext.engine import PoolOptions, open_pool
from openwebtext.index import Corpus
from support import held_reads

_held = held_reads


@pytest.mark.parametrize("kind", ["documents", "batches"])
def test_a_close_from_another_thread_inside_next_is_refused_and_the_reading_goes_on(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``close()`` from another thread while ``next`` ran raised "generator already executing"
    after marking the batches closed: their loop ended as if the data had (its workers left
    running), or the documents went on with nothing said. Now it is refused, clearly, and
    the reading goes on, whole."""
    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")

    def subject() -> Any:
        return loader.iter() if kind == "documents" else loader.batches(64, 2)

    with subject() as whole:
        want = [repr(item) for item in whole]
    inside, go = _held(monkeypatch)
    refused: list[BaseException] = []

    def close_while_inside() -> None:
        assert inside.wait(30)
        try:
            it.close()
        except RuntimeError as exc:
            refused.append(exc)
        go.set()

    closer = threading.Thread(target=close_while_inside)
    with subject() as it:
        closer.start()
        got = [repr(item) for item in it]
    closer.join(30)
    assert len(refused) == 1
    assert "close() while another thread is inside next()" in str(refused[0])
    assert got == want


def test_a_close_of_started_batches_from_another_thread_ends_the_reader_s_next(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Loader.batches(...).start()`` closed from another thread while the consumer waited
    in ``next`` for the runs read ahead: the consumer got the internal ``Halted`` (a
    ``BaseException``, past ``except Exception``), then "failed inside an earlier next()".
    A close is the end: ``StopIteration``."""
    inside, go = _held(monkeypatch)
    batches = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes").batches(64, 2).start()
    outcome: list[str] = []

    def consume() -> None:
        try:
            next(batches)
            outcome.append("a batch")
        except StopIteration:
            outcome.append("StopIteration")
        except BaseException as exc:  # (what the test is about: any other end)
            outcome.append(type(exc).__name__)

    consumer = threading.Thread(target=consume)
    assert inside.wait(30)
    consumer.start()
    time.sleep(0.5)  # (the consumer waits for the read ahead)
    closing = threading.Thread(target=batches.close)
    closing.start()
    time.sleep(0.2)
    go.set()
    closing.join(30)
    consumer.join(30)
    assert outcome == ["StopIteration"]
    with pytest.raises(StopIteration):
        next(batches)


def test_a_pool_closed_from_two_threads_at_once_closes_once(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program's exit closes the pools still open (``atexit``) while a stage's thread may be
    closing the same pool: the two closes ran at once, and one closed a process the other
    was still joining ("Cannot close a process while it is still running", a traceback at
    exit). One waits for the other now."""
    units = Corpus.open(small_corpus).units[:2]
    pool = open_pool(units, PoolOptions(workers=2, prefetch=1))
    reading = pool.run([0, 1])
    next(reading)  # (the workers started)
    process_type = type(pool._workers[0].process)
    joining, release = threading.Event(), threading.Event()
    join = process_type.join

    def slow_join(self: Any, timeout: float | None = None) -> None:
        if not joining.is_set():
            joining.set()
            assert release.wait(30)
        join(self, timeout)

    monkeypatch.setattr(process_type, "join", slow_join)
    errors: list[BaseException] = []

    def close() -> None:
        try:
            pool.close()
        except BaseException as exc:  # (what the test is about)
            errors.append(exc)

    first = threading.Thread(target=close)
    first.start()
    assert joining.wait(30)
    second = threading.Thread(target=close)
    second.start()
    time.sleep(0.3)
    release.set()
    first.join(30)
    second.join(30)
    assert errors == []
    assert pool.closed
    reading.close()


def test_a_close_from_another_thread_while_best_fit_packs_ends_that_next(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A close from another thread that lands while the packer packs (no document being read:
    the close goes through) left best fit to pack the window it had as if the documents had
    ended, and hand out its batch after the close. That ``next`` ends now, the packer's
    state the last batch's."""
    from openwebtext.stream import packing

    loader = Loader(small_corpus, workers=0, seed=3, tokenizer="bytes")
    packing_now, go = threading.Event(), threading.Event()
    real_fit, calls = packing.fit, []

    def fit(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # (the second window)
            packing_now.set()
            assert go.wait(30)
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(packing, "fit", fit)
    batches = loader.batches(64, 2, packing="bestfit", window=8)
    first = [next(batches) for _ in range(3)]
    assert len(calls) == 1
    states = [batches.state_dict()]
    outcome: list[str] = []

    def consume() -> None:
        try:
            while True:
                next(batches)
                states.append(batches.state_dict())
        except StopIteration:
            outcome.append("StopIteration")
        except BaseException as exc:  # (what the test is about: any other end)
            outcome.append(type(exc).__name__)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert packing_now.wait(30)
    batches.close()  # (the documents' generator is not running: the close goes through)
    handed = len(states)
    go.set()
    consumer.join(30)
    assert first and outcome == ["StopIteration"]
    assert len(states) == handed  # no batch after the close
    assert batches.state_dict() == states[-1]  # (the last batch handed out's)
