"""Process faults: killed and hung workers, retries on a fresh worker, consumers slower than
the timeout, abandoned iterators. (Reliability, issue #5.)
"""

from __future__ import annotations

import gc
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import (
    Loader,
    WorkerError,
)
from openwebtext.engine import Reader
from openwebtext.engine.member import Member
from openwebtext.records import Unit
from support import (
    HANG_BOUND,
    LAST,
    MIDDLE,
    Docs,
    Members,
    all_but,
    child_pids,
    copy_corpus,
    flip_bit,
    member_offset,
    run,
    where,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- process faults ---------------------------------------------------------------------


@pytest.mark.parametrize("action", ["kill", "hang"])
@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_worker_killed_or_hung_every_time(
    action: str,
    policy: str,
    small_corpus: Path,
    pristine: Members,
    worker_fault: Callable[..., Path],
) -> None:
    """raise: a WorkerError naming file and member; skip: one retry, then a counted skip."""
    attempts = worker_fault(MIDDLE[1], action)
    start = time.monotonic()
    outcome = run(small_corpus, workers=2, on_error=policy, timeout=1.0)
    assert time.monotonic() - start < HANG_BOUND  # a bound against hanging, not a speed check
    why = "exited with code -9" if action == "kill" else "sent nothing for 1 s"
    blamed = re.escape(where(str(small_corpus / MIDDLE[0]), MIDDLE[1]))
    named = rf"worker \d+ \(pid \d+\) {why} while reading {blamed}"
    pids = attempts.read_text().split()
    if policy == "raise":
        assert isinstance(outcome.error, WorkerError)
        assert re.fullmatch(named, str(outcome.error)), str(outcome.error)
        assert (outcome.error.path, outcome.error.member) == (
            str(small_corpus / MIDDLE[0]),
            MIDDLE[1],
        )
        assert len(pids) == 1
        assert set(outcome.docs) <= set(all_but(pristine, MIDDLE))
    else:
        assert outcome.error is None
        assert len(pids) == 2 and pids[0] != pids[1]  # retried once, on another process
        assert outcome.docs == all_but(pristine, MIDDLE)
        stats = outcome.stats
        assert stats is not None
        assert (stats.skipped_members, stats.skipped_documents) == (1, 0)
        assert re.fullmatch(named, stats.skipped[0]), stats.skipped


@pytest.mark.parametrize("action", ["kill", "hang"])
def test_worker_killed_or_hung_once_is_retried(
    action: str,
    small_corpus: Path,
    pristine: Members,
    worker_fault: Callable[..., Path],
) -> None:
    """skip: the unit of a worker that died or hung once is read again; nothing is lost."""
    attempts = worker_fault(MIDDLE[1], action, times=1)
    outcome = run(small_corpus, workers=2, on_error="skip", timeout=1.0)
    assert outcome.error is None
    assert outcome.docs == all_but(pristine)
    assert outcome.stats is not None and outcome.stats.skipped == ()
    assert len(attempts.read_text().split()) == 2


def test_retry_runs_on_a_fresh_worker(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """skip: a blamed unit is read again by the worker spawned to replace the dead one."""
    log = tmp_path / "reads"
    real = Reader.read

    def read(self: Reader, unit: Unit) -> Member:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {unit.member}\n")
        if unit.member == LAST[1] and log.read_text().count(LAST[1]) == 1:
            time.sleep(1.0)  # the other worker finishes its units and falls idle meanwhile
            os.kill(os.getpid(), signal.SIGKILL)
        return real(self, unit)

    monkeypatch.setattr(Reader, "read", read)
    outcome = run(small_corpus, workers=2, shuffle=False, on_error="skip")
    assert outcome.error is None and len(outcome.docs) == 120
    reads = [line.split() for line in log.read_text().splitlines()]
    first = next(k for k, (_, member) in enumerate(reads) if member == LAST[1])
    retry_pid = [pid for pid, member in reads if member == LAST[1]][1]
    assert retry_pid not in {pid for pid, _ in reads[: first + 1]}


def test_consumer_slower_than_timeout_is_not_a_hang(small_corpus: Path, pristine: Members) -> None:
    """Pauses of the consumer longer than ``timeout`` do not count against the workers."""
    docs: Docs = {}
    with Loader(
        str(small_corpus), workers=2, timeout=1.0, shuffle_buffer=0, prefetch=1
    ).iter() as it:
        for k, doc in enumerate(it):
            if k in (0, 70):
                time.sleep(2.0)  # the workers' results wait, unread, for twice the timeout
            docs[doc.name] = doc.text
    assert docs == all_but(pristine)


def test_skipping_never_sleeps(
    tmp_path: Path,
    small_corpus: Path,
    pristine: Members,
    monkeypatch: pytest.MonkeyPatch,
    worker_fault: Callable[..., Path],
) -> None:
    """No ``time.sleep`` (consumer or workers) while skipping bad data and a dead worker."""
    corpus = copy_corpus(small_corpus, tmp_path)
    offset, size = member_offset(corpus / LAST[0], LAST[1])
    flip_bit(corpus / LAST[0], offset + size // 2)
    calls = tmp_path / "sleeps"
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        with open(calls, "a") as f:
            f.write(f"{os.getpid()} {seconds}\n")
        real_sleep(seconds)

    worker_fault(MIDDLE[1], "kill")
    with monkeypatch.context() as patch:
        patch.setattr(time, "sleep", sleep)
        outcome = run(corpus, workers=2, on_error="skip")
    assert outcome.stats is not None and outcome.stats.skipped_members == 2
    assert outcome.docs == all_but(pristine, MIDDLE, LAST)
    assert not calls.exists(), calls.read_text()


def _dropped_stops_its_workers_at_once(start: Callable[[], Any]) -> None:
    """The iterator ``start`` makes, one item taken and its last reference dropped, has
    stopped its 2 workers, the cyclic GC off."""
    gc.collect()
    gc.disable()
    try:
        it = start()
        next(it)
        assert len(child_pids()) == 2
        del it
        assert child_pids() == []
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.parametrize("how", ["break", "del"])
def test_abandoned_iterator_stops_its_workers_at_once(how: str, small_corpus: Path) -> None:
    """Dropping a running iterator stops its workers at once, without the cyclic GC."""
    if how == "del":
        _dropped_stops_its_workers_at_once(Loader(str(small_corpus), workers=2).iter)
        return
    gc.disable()
    try:
        for _ in Loader(str(small_corpus), workers=2):
            break
        assert child_pids() == []
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.parametrize("what", ["documents", "concat", "bestfit"])
def test_an_abandoned_mixture_stops_its_workers_at_once(
    what: str, small_corpus: Path, tmp_path: Path
) -> None:
    """A mixture's iterator or batches dropped stop the workers at once, without the cyclic
    GC (before, its stream held the generator that held the stream: a cycle, the workers
    alive until a collection)."""
    from openwebtext import Mixture
    from tables_support import mixture_folders

    loader = Loader(Mixture(mixture_folders(small_corpus, tmp_path)), workers=2,
                    tokenizer="bytes", epochs=None)  # fmt: skip
    _dropped_stops_its_workers_at_once(
        loader.iter if what == "documents" else lambda: loader.batches(64, 2, packing=what)
    )
