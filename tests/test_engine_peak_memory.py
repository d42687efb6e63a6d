"""Limits and peak memory, measured in a fresh interpreter: decompression bombs stopped by the
limit, plain tars over it refused before they are read. (Reliability, issue #5.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from support import (
    HANG_BOUND,
    A,
    MiB,
    outer_tar,
    xz_member,
    xz_zeros,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- limits and peak memory ------------------------------------------------------------


#: Read a corpus under raise and under skip; print the outcome and peak RSS as JSON.
PEAK_RSS = """
import json, resource, sys, time
from openwebtext import Loader, OWTError
path, limit = sys.argv[1], int(sys.argv[2])
result = {}
start = time.monotonic()
for policy in ("raise", "skip"):
    try:
        with Loader(path, workers=1, on_error=policy, max_member_bytes=limit).iter() as it:
            names = sorted(d.name for d in it)
            result[policy] = {"documents": names, "skipped": list(it.stats.skipped)}
    except OWTError as exc:
        result[policy] = {"error": type(exc).__name__, "path": getattr(exc, "path", None),
                          "member": getattr(exc, "member", None), "message": str(exc)}
result["seconds"] = time.monotonic() - start
result["worker_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
try:  # this interpreter's own high-water mark: ru_maxrss keeps the parent's across exec
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
except OSError:
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result["consumer_peak_mib"] = hwm / 1024
print(json.dumps(result))
"""


def peak_rss_run(path: Path, limit: int) -> dict[str, Any]:
    """Run ``PEAK_RSS`` in a fresh interpreter (whose only children are the workers)."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(path), str(limit)],
        capture_output=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_decompression_bomb_is_stopped_by_the_limit(tmp_path: Path) -> None:
    """A 2 GiB-of-zeros xz member (~320 KB) fails fast at 64 MiB; no process nears 2 GiB."""
    bomb = xz_zeros(128)  # 128 x 16 MiB = 2 GiB decompressed
    assert len(bomb) < 400_000
    tar = outer_tar(tmp_path / "bomb.tar", [("good_data.xz", xz_member(A)), ("bomb_data.xz", bomb)])
    result = peak_rss_run(tar, 64 * MiB)
    assert result["raise"]["error"] == "MemberTooLarge"
    assert (result["raise"]["path"], result["raise"]["member"]) == (str(tar), "bomb_data.xz")
    assert "max_member_bytes=67108864" in result["raise"]["message"]
    assert result["skip"]["documents"] == sorted(A)
    assert len(result["skip"]["skipped"]) == 1 and "bomb_data.xz" in result["skip"]["skipped"][0]
    assert result["seconds"] < HANG_BOUND
    assert result["worker_peak_mib"] < 512, result  # 2048 MiB if the kernel had to stop it
    assert result["consumer_peak_mib"] < 512, result


def test_plain_tar_over_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """A 300 MiB uncompressed unit over a 16 MiB limit is refused without being read."""
    size = 300 * MiB
    tar = tmp_path / "plain.tar"
    info = tarfile.TarInfo("big.txt")
    info.size = size
    with open(tar, "wb") as f:  # sparse: costs no disk
        f.write(info.tobuf(format=tarfile.GNU_FORMAT))
        f.truncate(512 + size + 1024)
    result = peak_rss_run(tar, 16 * MiB)
    assert result["raise"]["error"] == "MemberTooLarge"
    assert result["worker_peak_mib"] < 200, result
