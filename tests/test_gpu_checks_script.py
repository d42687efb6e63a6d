"""benchmarks/gpu_checks.sh, the GPU checks run unattended on a GPU machine: here, with no
CUDA device, it skips the CUDA steps, each named, and runs the others (it exited 2 at once,
running none of them)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,  # (about a minute: the device stage's tests, two benchmarks' small runs)
    pytest.mark.timeout(1200),  # (the script's own bound: past the suite's 120 s on a slow day)
    pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device: the script is its run"),
]


def test_without_cuda_the_cuda_steps_are_skipped_by_name_and_the_others_run(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "OWT_NO_INSTALL": "1", "OWT_GPU_REPORT": str(tmp_path / "gpu.json"),
           "OWT_REQUIRE_CUDA": "1"}  # fmt: skip
    ran = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_checks.sh")], env=env,
                         capture_output=True, text=True, timeout=1200)  # fmt: skip
    said = dict(re.findall(r"^=== (.+?): (ok|SKIPPED|FAILED)\b", ran.stdout, re.MULTILINE))
    assert said == {
        "CUDA tests": "SKIPPED",
        "device stage and mask tests": "ok",
        "GPU feed benchmark": "SKIPPED",
        "GPU feed benchmark, CPU smoke run": "ok",
        "start() benchmark": "ok",
        "train_gpt example on CUDA": "SKIPPED",
    }, ran.stdout + ran.stderr
    assert "SKIPPED (no CUDA device): CUDA tests GPU feed benchmark train_gpt" in ran.stdout
    assert ran.returncode == 2  # OWT_REQUIRE_CUDA=1: skipped is not passed (without it: 0)
