"""The soak test (``OWT_SOAK_EPOCHS``, see docs/reliability.md): many passes, flat memory.
(Reliability, issue #5.)
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest

from openwebtext import (
    Loader,
)
from support import (
    Members,
    all_but,
    child_pids,
    fd_table,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- soak --------------------------------------------------------------------------------


SOAK_PASSES = int(os.environ.get("OWT_SOAK_EPOCHS", "20"))


def _rss_kib(pid: int | str = "self") -> int:
    """Resident set size of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def _flat(samples: list[float], margin_kib: float) -> bool:
    """The median of the last few samples is within ``margin_kib`` of the first few's."""
    n = max(1, len(samples) // 4)
    return statistics.median(samples[-n:]) <= statistics.median(samples[:n]) + margin_kib


@pytest.mark.slow
@pytest.mark.timeout(60 + 5 * SOAK_PASSES)
def test_soak_many_passes_slow_consumer(small_corpus: Path, pristine: Members) -> None:
    """``OWT_SOAK_EPOCHS`` passes (new iterators, epoch=k) with a slow consumer: nothing grows.

    RSS of the consumer (after each pass) and of the workers (mid-pass) stays flat, open
    descriptors stay the same, and no child process outlives its pass.
    """
    originals = all_but(pristine)
    fds = fd_table()
    consumer: list[float] = []
    workers: list[float] = []
    for epoch in range(SOAK_PASSES + 1):  # pass 0 warms up (imports, allocator)
        seen = 0
        with Loader(str(small_corpus), workers=2, epoch=epoch, shuffle_buffer=50).iter() as it:
            for doc in it:
                assert originals[doc.name] == doc.text
                seen += 1
                if seen % 10 == 0:
                    time.sleep(0.001)
                if seen == 60:
                    pids = child_pids()
                    assert len(pids) == 2
                    if epoch:
                        workers.append(statistics.mean(_rss_kib(p) for p in pids))
        assert seen == len(originals)
        assert child_pids() == []
        assert fd_table() == fds
        if epoch:
            consumer.append(_rss_kib())
    assert _flat(consumer, 16 * 1024), consumer
    assert _flat(workers, 16 * 1024), workers


@pytest.mark.slow
@pytest.mark.timeout(60 + 5 * SOAK_PASSES)
def test_soak_one_iterator_many_epochs(small_corpus: Path, pristine: Members) -> None:
    """One iterator over ``OWT_SOAK_EPOCHS`` epochs: worker and consumer RSS stay flat."""
    originals = all_but(pristine)
    fds = fd_table()
    consumer: list[float] = []
    workers: list[float] = []
    per_epoch = len(originals)
    with Loader(
        str(small_corpus), workers=2, epochs=SOAK_PASSES + 1, shuffle_buffer=50
    ).iter() as it:
        for seen, doc in enumerate(it, 1):
            assert originals[doc.name] == doc.text
            if seen % 10 == 0:
                time.sleep(0.001)
            if seen % per_epoch == per_epoch // 2 and seen > per_epoch:
                pids = child_pids()
                assert len(pids) == 2
                workers.append(statistics.mean(_rss_kib(p) for p in pids))
                consumer.append(_rss_kib())
        assert seen == per_epoch * (SOAK_PASSES + 1)
        assert it.stats.skipped == ()
    assert child_pids() == []
    assert fd_table() == fds
    assert _flat(consumer, 16 * 1024), consumer
    assert _flat(workers, 16 * 1024), workers
