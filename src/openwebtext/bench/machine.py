"""The machine: CPU, cores, memory and versions, and how busy it was meanwhile."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
from collections.abc import Sequence
from typing import Any

from openwebtext import __version__
from openwebtext.bench.runs import Run
from openwebtext.engine import cpu_count


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _liblzma_version() -> str:
    # The lzma module does not expose the version of the liblzma it was built against.
    try:
        lib = ctypes.CDLL("liblzma.so.5")
        lib.lzma_version_string.restype = ctypes.c_char_p
        version: bytes = lib.lzma_version_string()
        return version.decode()
    except (OSError, AttributeError):
        return "unknown"


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """CPU model, usable cores, memory, and the versions that set the speed."""
    return {
        "cpu_model": cpu_model(),
        "cores": cpu_count(),
        "cpus": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
        "python": platform.python_version(),
        "liblzma": _liblzma_version(),
        "openwebtext": __version__,
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
    }


def cpu_ticks() -> tuple[int, int, int]:
    """(all, idle, steal) CPU ticks since boot, from /proc/stat (zeros where there is none)."""
    try:
        with open("/proc/stat", encoding="utf-8") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
        # user nice system idle iowait irq softirq steal
        idle, iowait, steal = fields[3], fields[4], fields[7]
    except (OSError, ValueError, IndexError):
        return 0, 0, 0
    return sum(fields), idle + iowait, steal


def run_conditions(
    before: tuple[int, int, int], after: tuple[int, int, int], seconds: float, runs: Sequence[Run]
) -> dict[str, float | None]:
    """How busy the machine was with other things while we measured.

    ``other_cores``: CPU seconds per second spent by everything but our children (other
    users, this process' own polling); ``steal``: the share the hypervisor took.
    """
    total, idle, steal = (a - b for a, b in zip(after, before, strict=True))
    if total <= 0 or seconds <= 0:
        return {"seconds": seconds, "other_cores": None, "steal": None}
    busy = (total - idle - steal) / os.sysconf("SC_CLK_TCK")
    ours = sum(r.cpu_s for r in runs)
    return {
        "seconds": seconds,
        "other_cores": max(0.0, busy - ours) / seconds,
        "steal": steal / total,
    }
