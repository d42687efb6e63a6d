"""What the scripts of ``benchmarks/`` share: fresh child runs (through
``openwebtext.bench``'s runner: timeout, process group, memory), a warm page cache, the CPU,
and how busy other processes kept the machine meanwhile. Imported by the scripts as
``common`` (their folder is first on ``sys.path`` when run as ``python benchmarks/X.py``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Any

from openwebtext import Corpus, bench
from openwebtext.bench.machine import cpu_model, cpu_ticks

__all__ = ["CHILD_TIMEOUT", "OtherLoad", "cpu_model", "run_child", "warm_page_cache"]


#: Seconds a child may run before it is killed (with everything it started) and the
#: benchmark stops; generous: the slowest child (a whole-corpus nanoGPT prepare) takes minutes.
CHILD_TIMEOUT = 3600.0


def run_child(
    script: str, kind: str, args: list[str], *, timeout: float = CHILD_TIMEOUT
) -> dict[str, Any]:
    """Run ``python SCRIPT --child KIND ARGS`` in a fresh process; its last line of JSON,
    with the child's ``max_rss_bytes`` and ``peak_pss_bytes`` (its whole process group) and
    ``cpu_s`` (user + system seconds of it and the descendants it waited for).

    Through ``openwebtext.bench.run_child``: in its own session, killed with its process
    group when it ends, times out or this script is interrupted.
    """
    command = [sys.executable, script, "--child", kind, *args]
    done = bench.run_child(command, timeout)
    if done.status == bench.TIMEOUT:
        sys.exit(f"{kind} timed out after {timeout:g} s: {done.stderr_tail}")
    if done.exit_code != 0:
        sys.exit(f"{kind} failed ({done.exit_code}): {done.stderr_tail}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report.setdefault("max_rss_bytes", done.max_rss_bytes)
    report.setdefault("peak_pss_bytes", done.peak_pss_bytes)
    report.setdefault("cpu_s", done.cpu_s)
    return report


def warm_page_cache(paths: list[str]) -> None:
    """Read every file of the corpus once, so that no run pays for the disk."""
    for path in sorted({u.path for u in Corpus.open(paths).units}):
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass


class OtherLoad:
    """From its creation to ``measure()``: the cores kept busy by everything but our children,
    and the cores the hypervisor stole (``/proc/stat`` ticks, children's rusage)."""

    def __init__(self) -> None:
        self._ticks = cpu_ticks()
        self._start = time.perf_counter()

    def measure(self) -> tuple[float, float, float]:
        """(seconds, other processes' cores, stolen cores) since creation."""
        seconds = time.perf_counter() - self._start
        total, idle, steal = (a - b for a, b in zip(cpu_ticks(), self._ticks, strict=True))
        tick = os.sysconf("SC_CLK_TCK")
        ours = resource.getrusage(resource.RUSAGE_CHILDREN)
        other = ((total - idle) / tick - ours.ru_utime - ours.ru_stime) / seconds
        return seconds, other, steal / tick / seconds
