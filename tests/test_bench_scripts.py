"""benchmarks/common.py: the scripts' children run through openwebtext.bench's runner."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import common

CHILD = """
import json, subprocess, sys, time
kind = sys.argv[sys.argv.index("--child") + 1]
if kind == "hang":
    time.sleep(600)
if kind == "fail":
    sys.exit("it broke")
left = None
if kind == "leave":  # a grandchild that would outlive its parent
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]).pid
print("noise")
print(json.dumps({"kind": kind, "args": sys.argv[3:], "left": left}))
"""


@pytest.fixture
def script(tmp_path: Path) -> str:
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return str(path)


def test_the_last_json_line_with_the_memory_of_the_child(script: str) -> None:
    report = common.run_child(script, "ok", ["--out", "x"])
    assert report["kind"] == "ok" and report["args"] == ["--out", "x"]
    assert report["max_rss_bytes"] > 1 << 20


def test_a_hanging_child_is_killed_at_the_timeout(script: str) -> None:
    start = time.monotonic()
    with pytest.raises(SystemExit, match="hang timed out after 1 s"):
        common.run_child(script, "hang", [], timeout=1)
    assert time.monotonic() - start < 30


def test_a_failing_child_stops_the_benchmark_with_its_stderr(script: str) -> None:
    with pytest.raises(SystemExit, match=r"fail failed \(1\): it broke"):
        common.run_child(script, "fail", [])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_nothing_the_child_started_outlives_it(script: str) -> None:
    report = common.run_child(script, "leave", [])
    deadline = time.monotonic() + 10
    while _alive(report["left"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(report["left"])
