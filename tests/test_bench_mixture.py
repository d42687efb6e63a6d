"""benchmarks/bench_mixture.py: its smoke mode runs end to end and reports what it read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mixture.py"


@pytest.mark.slow  # some twenty child processes: seconds each on a busy machine
def test_the_mixture_benchmark_runs_its_smoke_mode() -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "--smoke"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1  # one JSON line, the progress on stderr
    report = json.loads(lines[0])
    assert report["smoke"] is True

    read = report["read"]
    total = read["documents"]["a"] + read["documents"]["b"]
    for run in read["runs"]:
        assert run["documents_per_s"] > 0 and run["seconds"] > 0
        if run["case"] == "one":
            assert run["documents"] == total and run["parts"] == {}
            continue
        parts = run["parts"]
        # Each part handed out (at least) its whole epoch, and every document said its part.
        for name in ("a", "b"):
            assert parts[name]["handed"] == parts[name]["documents"] >= read["documents"][name]
        assert run["documents"] == parts["a"]["handed"] + parts["b"]["handed"]
        if run["case"] == "sized":  # both epochs end together: one document over at most
            assert run["documents"] <= total + 1
    for name, entry in read["summary"].items():
        assert entry["ratio"] == 1.0 if name.endswith(" one") else entry["ratio"] > 0

    first = report["first"]
    assert (first["parts"], first["files"]) == (4, 3)
    for run in first["runs"]:
        assert 0 < run["open_s"] < run["first_s"] < run["process_s"]
        expected = {f"p{i:02d}" for i in range(4)} if run["layout"] == "mix" else {None}
        assert run["source"] in expected
    assert set(first["summary"]) == {f"world_size={w} {k}" for w in (1, 2) for k in ("one", "mix")}
