"""``Loader.batches(...).start()`` (issue 37): the first batch's documents are read on a thread
while the caller does something else; the batches, states and counts are those without it.
(How much sooner the first batch comes: ``benchmarks/bench_start_early.py``.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, CorruptMember, Loader
from support import child_pids

KINDS = [("concat", {}), ("bestfit", {"packing": "bestfit", "window": 20})]


def _loader(corpus: Path, workers: int) -> Loader:
    return Loader(corpus, tokenizer="bytes", workers=workers, seed=2, shuffle_buffer=25)


def _run(batches: Any, n: int) -> tuple[list[Any], list[dict[str, Any]]]:
    got, states = [], [batches.state_dict()]
    for batch in batches:
        got.append(batch)
        states.append(batches.state_dict())
        if len(got) == n:
            break
    return got, states


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        all(np.array_equal(x, y) for x, y in zip(p, q, strict=True))
        for p, q in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize(("packing", "options"), KINDS)
def test_start_then_iterating_gives_the_same_batches_and_states(
    indexed: Path, workers: int, packing: str, options: dict[str, Any]
) -> None:
    loader = _loader(indexed, workers)
    with loader.batches(64, 3, segments=True, **options) as plain:
        want, want_states = _run(plain, 12)
        want_stats = plain.stats
    with loader.batches(64, 3, segments=True, **options) as early:
        assert early.start() is early
        early.start()  # again: nothing more
        got, states = _run(early, 12)
        stats = early.stats
    assert _same(got, want) and len(got) == 12
    assert states == want_states
    assert (stats.pieces, stats.padding_ids) == (want_stats.pieces, want_stats.padding_ids)


@pytest.mark.parametrize(("packing", "options"), KINDS)
def test_start_on_a_resumed_run_goes_on_where_it_left(
    indexed: Path, packing: str, options: dict[str, Any]
) -> None:
    loader = _loader(indexed, 0)
    with loader.batches(64, 3, **options) as batches:
        whole = list(batches)
    with loader.batches(64, 3, **options) as batches:
        for _ in range(5):
            next(batches)
        state = batches.state_dict()
    with loader.batches(64, 3, state=state, **options) as batches:
        rest = list(batches.start())
    assert len(rest) == len(whole) - 5
    assert all(np.array_equal(a, b) for a, b in zip(rest, whole[5:], strict=True))


def test_a_started_iterator_closed_before_its_first_batch_stops_its_workers(
    indexed: Path,
) -> None:
    before = set(child_pids())
    batches = _loader(indexed, 1).batches(64, 3).start()
    deadline = time.monotonic() + 30
    while not set(child_pids()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(child_pids()) - before  # the worker started before any next()
    batches.close()
    assert not set(child_pids()) - before


@pytest.mark.parametrize("door", ["start", "a thread of the caller's"])
def test_workers_forked_on_a_thread_that_ends_outlive_it(indexed: Path, door: str) -> None:
    """``start()`` opens the pool on its own thread, which ends once the first batch is
    made; a caller may take a first batch on a thread of its own. The workers asked the kernel
    to kill them when their parent dies (``PR_SET_PDEATHSIG``), which Linux does when the
    *thread* that forked them ends: killed at once, the run ended in a ``WorkerError`` (or its
    workers were started again). Now they live as long as the process that uses them."""
    loader = _loader(indexed, 2)
    with loader.batches(64, 3) as plain:
        want = list(plain)
    before = set(child_pids())
    with loader.batches(64, 3) as batches:
        got = []
        if door == "start":
            batches.start()
            for thread in threading.enumerate():  # (it may have ended already)
                if thread.name == "openwebtext-start":
                    thread.join()
        else:
            taker = threading.Thread(target=lambda: got.append(next(batches)))
            taker.start()
            taker.join()
        workers = set(child_pids()) - before
        assert len(workers) == 2
        time.sleep(0.5)  # (the kernel's kill is at once; its reaping is not)
        assert workers <= {pid for pid in child_pids() if _alive(pid)}
        got += [next(batches) for _ in range(5)]
        assert set(child_pids()) - before == workers  # none started again
        got += list(batches)
    assert _same(got, want)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_an_error_while_starting_is_raised_at_the_first_batch(tmp_path: Path) -> None:
    broken = tmp_path / "train.bin"
    broken.write_bytes(np.array([1, 2, 256], "<u2").tobytes())
    corpus = Corpus.open_tokens(broken, eot=256)
    broken.write_bytes(b"\x01")  # cut short after it was opened
    batches = Loader(corpus, tokenizer="bytes", workers=0).batches(2, 1).start()
    with pytest.raises(CorruptMember, match="the file changed since it was indexed"):
        next(batches)
    batches.close()
