"""What a red team of ``ahead`` (session 17 of the rounds) found, fixed.

1. ``set_weights`` from another thread: the consumer could hold a batch taken off the queue,
   not yet handed out, while the change read the state before it and restarted the source
   there: that batch came twice (or a stopped thread's late batch was handed out). Now a
   batch's hand-out and a restart are under one lock: a batch made before the change is
   handed out before it, or dropped and made again with it; a close or a state read from
   another thread meanwhile is whole too.
2. A ``StopIteration`` out of ``move``, ``receive`` or the source's ``state_dict()`` ended the
   stage silently (the thread gone: the next ``next()`` waited for ever), or lost a batch.
   Now it is an error of that callable, and a ``next()`` after says so.

Every race here is forced (events, monkeypatched hooks); the waits are bounds, never a pace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, ahead
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.stream import Ahead, readahead
from openwebtext.stream.producer import Made
from openwebtext.stream.turns import OwnNext
from openwebtext.synth import write_corpus
from support import stateful_items, wait_until

#: A bound on every wait for another thread (never reached when the code is right).
BOUND = 30.0
NEW = {"a": 0.95, "b": 0.05}


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory: pytest.TempPathFactory) -> Mixture:
    """The red team's mixture: the train ids of two small generated corpora, half each."""
    root = tmp_path_factory.mktemp("r17")
    bins = []
    for seed in (0, 1):
        write_corpus(root / f"c{seed}", subsets=2, members=3, docs=5, seed=seed)
        prepare(Corpus.open(root / f"c{seed}"), root / f"t{seed}",
                PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.2))  # fmt: skip
        bins.append(next((root / f"t{seed}").rglob("train.bin")))
    return Mixture({"a": Corpus.open_tokens(bins[0]), "b": Corpus.open_tokens(bins[1])},
                   weights={"a": 0.5, "b": 0.5})  # fmt: skip


class Weighted:
    """Batches ``[n, w]`` (n: 1, 2, ...; w: the weight of "a" they were made with), the state
    n and w; ``set_weights`` goes on from a state with new weights, as a mixture's does.
    ``on_state``/``on_set_weights``: hooks a test forces an interleaving with."""

    def __init__(self) -> None:
        self.n, self.w, self.closed = 0, 1, False
        self.on_state: Callable[[], None] | None = None
        self.on_set_weights: Callable[[], None] | None = None

    def __iter__(self) -> Iterator[np.ndarray[Any, Any]]:
        while True:
            self.n += 1
            yield np.array([self.n, self.w])

    def state_dict(self) -> dict[str, Any]:
        if self.on_state is not None:
            self.on_state()
        return {"n": self.n, "w": self.w}

    def set_weights(self, weights: dict[str, float], *, state: dict[str, Any]) -> None:
        if self.on_set_weights is not None:
            self.on_set_weights()
        self.n, self.w, self.closed = state["n"], int(weights["a"]), False

    def close(self) -> None:
        self.closed = True


def in_thread(call: Callable[[], Any]) -> Any:
    """``call()`` on a thread of its own, its value or its error: it must end (a wait for
    ever is the failure)."""
    out: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            out.append((True, call()))
        except BaseException as error:  # (raised here, on the test's thread)
            out.append((False, error))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), "it waits for ever"
    ok, value = out[0]
    if not ok:
        raise value
    return value


def held_after_taking(stage: Ahead, nth: int) -> tuple[threading.Event, threading.Event]:
    """Hold the consumer right after it took its ``nth`` item off the first producer's queue,
    before it hands it out: (held, go)."""
    ready = stage._producer.ready
    get, taken = ready.get, [0]
    held, go = threading.Event(), threading.Event()

    def holding(block: bool = True, timeout: float | None = None) -> Any:
        item = get(block, timeout)
        if block:  # (the consumer's wait; a stop's drain takes them without blocking)
            taken[0] += 1
            if taken[0] == nth:
                held.set()
                assert go.wait(BOUND)
        return item

    ready.get = holding  # type: ignore[method-assign]
    return held, go


def consume(stage: Ahead, n: int, got: list[Any], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            for _, batch in zip(range(n), stage, strict=False):
                got.append(np.array(batch))
        except BaseException as error:  # (asserted on the test's thread)
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


# -- 1. set_weights (and close, state_dict) from another thread -------------------------------


@pytest.mark.parametrize("before", [1, 4])
def test_a_batch_taken_not_handed_out_when_the_weights_change_is_made_again_never_twice(
    two_parts: Mixture, before: int
) -> None:
    """The consumer holds batch ``before + 1`` off the queue when another thread changes the
    weights (the red team's race, forced): the batches are an uninterrupted run's with the
    change after ``before`` batches. Before, that batch was handed out and then made again:
    twice (the concat rows no longer chained)."""
    loader = Loader(two_parts, seed=0, epochs=None, workers=0, tokenizer="bytes")
    n = before + 10  # (the change shows by then: after the document cut across it)

    def run(at: int) -> list[Any]:
        with loader.batches(seq_len=1024, batch_size=1) as it:
            out = []
            for i in range(n):
                if i == at:
                    it.set_weights(NEW)
                out.append(np.array(next(it)))
            return out

    want, unchanged = run(before), run(-1)
    assert any(not np.array_equal(a, b) for a, b in zip(want, unchanged, strict=True))
    stage = ahead(loader.batches(seq_len=1024, batch_size=1), 3)
    held, go = held_after_taking(stage, before + 1)
    got: list[Any] = []
    errors: list[BaseException] = []
    consumer = consume(stage, n, got, errors)
    assert held.wait(BOUND)
    stage.set_weights(NEW)
    go.set()
    consumer.join(BOUND)
    stage.close()
    assert not consumer.is_alive() and not errors
    assert len(got) == n and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_batch_a_stopped_thread_queued_after_its_stop_is_never_handed_out() -> None:
    """The thread of the batches before a change was inside its queue's ``put`` when it was
    told to stop: its batch lands after the stop emptied the queue, while the consumer waits
    on that queue. It is dropped: the batches go on from the change. Before, it was handed
    out (a batch of the old weights, after the change)."""
    source = Weighted()
    stage = Ahead(source, 2)
    assert [next(stage).tolist() for _ in range(2)] == [[1, 1], [2, 1]]
    ready = stage._producer.ready
    get = ready.get
    held, go = threading.Event(), threading.Event()
    got: list[Any] = []
    errors: list[BaseException] = []

    def waiting_first(block: bool = True, timeout: float | None = None) -> Any:
        if block and not go.is_set():  # (the consumer waits on the old queue till then)
            held.set()
            assert go.wait(BOUND)
        return get(block, BOUND if block else timeout)

    ready.get = waiting_first  # type: ignore[method-assign]
    consumer = consume(stage, 3, got, errors)
    assert held.wait(BOUND)
    stage.set_weights({"a": 7})
    late = Made(np.array([-1, -1]), {"n": -1, "w": -1}, None)
    ready.put(late)  # (the stopped thread's put, landed after the stop's drain)
    go.set()
    consumer.join(BOUND)
    stage.close()
    assert not consumer.is_alive() and not errors
    assert [b.tolist() for b in got] == [[3, 7], [4, 7], [5, 7]]
    assert stage.state_dict() == {"n": 5, "w": 7}


def test_a_close_from_another_thread_while_the_weights_change_ends_the_stage() -> None:
    """Another thread closes the stage while ``set_weights`` restarts the source: the stage
    is closed, its source too, and a ``next()`` ends. Before, the change started the batches
    again after the close."""
    source = Weighted()
    stage = Ahead(source, 2)
    assert next(stage).tolist() == [1, 1]
    source.on_set_weights = lambda: in_thread(stage.close)
    stage.set_weights({"a": 7})
    assert in_thread(lambda: next(stage, None)) is None
    assert source.closed and stage.state_dict() == {"n": 1, "w": 7}  # (the change's)


def test_a_weights_change_the_source_refuses_ends_the_stage_saying_so() -> None:
    """The source could not go on with the new weights (it raised): the consumer's next
    ``next()``, on another thread, says the stage failed, never a silent end of the batches."""
    source = Weighted()
    stage = Ahead(source, 2)
    assert next(stage).tolist() == [1, 1]

    def refuse() -> None:
        raise OSError("the part's file is gone")

    source.on_set_weights = refuse
    with pytest.raises(OSError, match="the part's file is gone"):
        stage.set_weights({"a": 7})
    with pytest.raises(RuntimeError, match=r"set_weights: OSError: the part's file is gone"):
        in_thread(lambda: next(stage))


def test_a_weights_change_refused_while_the_consumer_waits_ends_its_loop_saying_so() -> None:
    """The consumer already waiting in ``next()`` when the change was refused: its loop ended
    as if the batches had run out (``END`` of a closed stage), the refusal unsaid."""

    class Slow:
        def __init__(self) -> None:
            self.k = 0

        def __iter__(self) -> Iterator[int]:
            while True:
                time.sleep(0.2)
                self.k += 1
                yield self.k

        def state_dict(self) -> dict[str, Any]:
            return {"k": self.k}

        def set_weights(self, weights: dict[str, float], *, state: dict[str, Any]) -> None:
            raise ValueError("the source refuses these weights")

    stage = Ahead(Slow(), 1)
    first, seen = threading.Event(), []

    def consume() -> None:
        try:
            for batch in stage:
                seen.append(batch)
                first.set()
            seen.append("ended")
        except RuntimeError as error:
            seen.append(str(error))

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    assert first.wait(BOUND)
    time.sleep(0.05)  # (the consumer waits for its second batch: 0.2 s away)
    with pytest.raises(ValueError, match="refuses these weights"):
        stage.set_weights({"a": 1.0})
    thread.join(BOUND)
    assert seen[0] == 1 and "set_weights: ValueError: the source refuses" in seen[-1], seen


def test_the_state_read_on_another_thread_as_the_stage_starts_is_never_read_ahead() -> None:
    """A state read while another thread starts the stage is the start's: never the source's
    read ahead beside the thread (nothing was handed out). Before, the state read found no
    batch handed out, then read the source while the started thread made batches ahead."""
    source = Weighted()
    stage = Ahead(source, 2)
    reader = threading.get_ident()
    starter = threading.Thread(target=stage.start, daemon=True)

    def start_meanwhile() -> None:
        if threading.get_ident() == reader and not starter.is_alive():
            starter.start()  # (the stage starts while the state is read)
            wait_until(lambda: source.n >= 2, 0.5)  # (bounded: the thread may not start)

    source.on_state = start_meanwhile
    assert stage.state_dict() == {"n": 0, "w": 1}
    starter.join(BOUND)
    source.on_state = None
    assert next(stage).tolist() == [1, 1] and stage.state_dict() == {"n": 1, "w": 1}
    stage.close()



def test_a_weights_change_inside_the_hand_out_on_its_own_thread_is_refused() -> None:
    """``set_weights`` on the consumer's thread while it hands a batch out (a signal handler
    landing there, here ``receive``) would restart the source before the batch's state is
    kept: it raises ``OwnNext``, as a mixture's batches do, and the batches go on whole.
    Before, it restarted there: the batch being handed out came again after it."""
    said: list[BaseException] = []
    source = Weighted()

    def receive(batch: Any) -> Any:
        if batch[0] == 2 and not said:
            try:
                stage.set_weights({"a": 7})
            except OwnNext as error:  # (the handler's own business: the batch goes on)
                said.append(error)
            else:
                said.append(AssertionError("not refused"))
        return batch

    stage = Ahead(source, 2, receive=receive)
    got = [next(stage).tolist() for _ in range(4)]
    stage.close()
    assert said and isinstance(said[0], OwnNext)
    assert got == [[1, 1], [2, 1], [3, 1], [4, 1]] and stage.state_dict() == {"n": 4, "w": 1}

# -- 2. a StopIteration out of a callable is its error, never the end ------------------------


class Counting:
    """The red team's source: batches ``[n, n]`` for ever, the state n."""

    def __init__(self, stop_state_at: int = -1) -> None:
        self.n, self.stop_state_at, self.closed = 0, stop_state_at, False

    def __iter__(self) -> Counting:
        return self

    def __next__(self) -> np.ndarray[Any, Any]:
        self.n += 1
        return np.full(2, self.n)

    def state_dict(self) -> dict[str, Any]:
        if self.n == self.stop_state_at:
            raise StopIteration
        return {"n": self.n}

    def close(self) -> None:
        self.closed = True


def said_failed(stage: Ahead, what: str) -> None:
    """A ``next()`` after (on a thread: it must not wait for ever) says the stage failed."""
    with pytest.raises(RuntimeError, match=rf"earlier next\(\) \(RuntimeError: {what}"):
        in_thread(lambda: next(stage, "ended"))


def test_a_stop_iteration_out_of_move_is_its_error_never_a_silent_end() -> None:
    def move(batch: Any) -> Any:
        if batch[0] == 3:
            raise StopIteration
        return batch

    source = Counting()
    stage = Ahead(source, 2, move=move)
    assert [int(next(stage)[0]) for _ in range(2)] == [1, 2]
    with pytest.raises(RuntimeError, match="move raised StopIteration"):
        in_thread(lambda: next(stage))
    said_failed(stage, "move raised StopIteration")
    assert stage.state_dict() == {"n": 2} and source.closed


def test_a_stop_iteration_out_of_receive_ends_the_stage_never_loses_a_batch() -> None:
    calls = [0]

    def receive(batch: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            raise StopIteration
        return batch

    source = Counting()
    stage = Ahead(source, 2, receive=receive)
    assert [int(next(stage)[0]) for _ in range(2)] == [1, 2]
    with pytest.raises(RuntimeError, match="receive raised StopIteration"):
        in_thread(lambda: next(stage))
    said_failed(stage, "receive raised StopIteration")  # (never batch 4: 3 was lost)
    assert stage.state_dict() == {"n": 2} and source.closed


def test_a_stop_iteration_out_of_the_sources_state_dict_is_its_error() -> None:
    source = Counting(stop_state_at=3)
    stage = Ahead(source, 2)
    assert [int(next(stage)[0]) for _ in range(2)] == [1, 2]
    with pytest.raises(RuntimeError, match=r"state_dict\(\) raised StopIteration"):
        in_thread(lambda: next(stage))
    said_failed(stage, r"the batches' state_dict\(\) raised")
    assert stage.state_dict() == {"n": 2}


def test_a_stop_iteration_out_of_the_sources_iter_is_its_error() -> None:
    """The one ``StopIteration`` no ``called`` wraps: the source's ``iter()`` on the thread."""

    class Source:
        def __iter__(self) -> Iterator[Any]:
            raise StopIteration("none")

        def state_dict(self) -> dict[str, Any]:
            return {}

    stage = Ahead(Source(), 2)
    with pytest.raises(RuntimeError, match="StopIteration"):
        next(stage)


def test_two_consumers_hand_out_in_order_and_the_state_is_the_last_batch_s() -> None:
    """Two threads in ``next()``: one holding batch 1 (taken, not yet handed out) while the
    other took batch 2 and handed it out first; then the first set the state back to batch
    1's, and a resume from it repeated batch 2. They take turns now. (The other thread is
    given half a second to take a batch it must not: bounded, it fails only the mutant.)"""
    stage = Ahead(Weighted(), 2)
    held, go = held_after_taking(stage, 1)
    got: dict[str, int] = {}
    first = threading.Thread(target=lambda: got.setdefault("a", int(next(stage)[0])),
                             daemon=True)  # fmt: skip
    first.start()
    assert held.wait(BOUND)
    second = threading.Thread(target=lambda: got.setdefault("b", int(next(stage)[0])),
                              daemon=True)  # fmt: skip
    second.start()
    time.sleep(0.5)
    go.set()
    first.join(BOUND)
    second.join(BOUND)
    assert got == {"a": 1, "b": 2} and stage.state_dict()["n"] == 2
    stage.close()


def test_a_thread_that_ended_without_a_word_is_an_error_never_a_wait_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread ended with nothing queued (neither the end nor an error): ``next()`` says
    so. Before, it waited on the empty queue for ever."""
    monkeypatch.setattr(readahead.Producer, "read", lambda self: None)
    source = Counting()
    stage = Ahead(source, 2)
    with pytest.raises(RuntimeError, match="ended without handing out their end or an error"):
        in_thread(lambda: next(stage))
    said_failed(stage, "the thread making the batches ahead ended")
    assert source.closed


def test_batches_that_run_out_still_end_the_stage() -> None:
    """(Unchanged: only the source running out ends the batches, as before.)"""
    stage = Ahead(stateful_items([np.zeros(2), np.ones(2)]), 2)
    assert len(list(stage)) == 2 and next(stage, "ended") == "ended"

