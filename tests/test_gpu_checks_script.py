"""benchmarks/gpu_checks.sh, the GPU checks run unattended on a GPU machine: here, with no
CUDA device, it skips the CUDA steps, each named, and runs the others (it exited 2 at once,
running none of them). Where an NVIDIA GPU is visible it requires CUDA unless told not to (a
torch without CUDA passed there), and a test skipped in the CPU's step fails it (a module
skipped whole, torchdata missing, was "ok")."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"

pytestmark = [
    pytest.mark.slow,  # (about a minute: the device stage's tests, two benchmarks' small runs)
    pytest.mark.timeout(1200),  # (the script's own bound: past the suite's 120 s on a slow day)
    pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device: the script is its run"),
]


def steps_said(stdout: str) -> dict[str, str]:
    return dict(re.findall(r"^=== (.+?): (ok|SKIPPED|FAILED)\b", stdout, re.MULTILINE))


def a_visible_gpu(folder: Path) -> str:
    """A PATH on which ``nvidia-smi -L`` lists a GPU (as on a machine whose torch has no CUDA)."""
    folder.mkdir()
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA Test GPU (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_without_cuda_the_cuda_steps_are_skipped_by_name_and_the_others_run(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OWT_REQUIRE_CUDA"}
    env |= {"OWT_NO_INSTALL": "1", "OWT_GPU_REPORT": str(tmp_path / "gpu.json"),
            "PATH": a_visible_gpu(tmp_path / "bin")}  # fmt: skip
    ran = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=1200)  # fmt: skip
    assert steps_said(ran.stdout) == {
        "CUDA preflight": "SKIPPED",
        "CUDA tests": "SKIPPED",
        "device stage and mask tests": "ok",
        "GPU feed benchmark": "SKIPPED",
        "GPU feed benchmark, CPU smoke run": "ok",
        "start() benchmark": "ok",
        "train_gpt example on CUDA": "SKIPPED",
    }, ran.stdout + ran.stderr
    assert "torch.version.cuda" in ran.stdout  # (None: a torch built without CUDA)
    assert "SKIPPED (no CUDA device): CUDA preflight CUDA tests GPU feed benchmark" in ran.stdout
    # A GPU visible and OWT_REQUIRE_CUDA unset: required, so skipped is not passed (status 2).
    assert "an NVIDIA GPU is visible here: OWT_REQUIRE_CUDA=1" in ran.stdout
    assert ran.returncode == 2


@pytest.mark.parametrize("require", [None, "0"])
def test_a_visible_gpu_requires_cuda_unless_told_and_a_skipped_cpu_test_fails(
    tmp_path: Path, require: str | None
) -> None:
    """Under a stand-in interpreter (no torch; its pytest skips a module whole, as without
    torchdata; the benchmarks pass): quick, and only the script's own logic is run."""
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -c ]; then exit 1; fi\n'  # (torch, pytest_timeout: do not import)
        'if [ "$1 $2" = "-m pytest" ]; then\n'
        "    echo \"SKIPPED [1] test_torch_device.py:23: could not import 'torchdata'\"\n"
        '    echo "1 skipped"; exit 0\n'
        "fi\n"
    )
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "OWT_REQUIRE_CUDA"}
    env |= {"OWT_NO_INSTALL": "1", "PYTHON": str(python), "PATH": a_visible_gpu(tmp_path / "bin")}
    if require is not None:
        env["OWT_REQUIRE_CUDA"] = require
    ran = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    said = steps_said(ran.stdout)
    assert said["device stage and mask tests"] == "FAILED", ran.stdout + ran.stderr
    assert "a test was skipped: each must run here" in ran.stdout
    assert said["GPU feed benchmark, CPU smoke run"] == said["start() benchmark"] == "ok"
    assert said["CUDA preflight"] == said["CUDA tests"] == "SKIPPED"
    announced = "an NVIDIA GPU is visible here: OWT_REQUIRE_CUDA=1" in ran.stdout
    assert announced == (require is None)
    assert ran.returncode == 1
