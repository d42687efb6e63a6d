"""Names every part of ``owt bench`` shares: the kinds of run, their statuses, the clock,
and :class:`BenchError`."""

from __future__ import annotations

import time

LOADER, CEILING, VS = "loader", "ceiling", "vs"
OK, TIMEOUT = "ok", "timeout"
#: Environment variable through which a child learns when it was spawned.
STARTED_ENV = "OWT_BENCH_STARTED"
#: Environment variable through which our children get ``--storage-option`` (as JSON):
#: credentials must not show on a command line (``ps``) nor in timings.csv.
STORAGE_ENV = "OWT_BENCH_STORAGE_OPTIONS"


class BenchError(Exception):
    """A benchmark that cannot go on: a child failed, or its report is unreadable."""


def now() -> float:
    # CLOCK_MONOTONIC is one clock for every process on Linux, so a child can subtract the
    # parent's spawn time from its own reading.
    return time.clock_gettime(time.CLOCK_MONOTONIC)
