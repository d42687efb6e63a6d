"""examples/train_tiny.py: stopping and resuming trains on exactly the same documents."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchdata.stateful_dataloader")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_tiny.py"


def train(corpus: Path, steps: int, checkpoint: Path, log: Path) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            str(EXAMPLE),
            str(corpus),
            "--steps",
            str(steps),
            "--batch-size",
            "8",
            "--every",
            "3",
            "--checkpoint",
            str(checkpoint),
            "--log",
            str(log),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_interrupted_training_sees_the_same_documents(small_corpus: Path, tmp_path: Path) -> None:
    train(small_corpus, 6, tmp_path / "a.pt", tmp_path / "a.log")
    out = train(small_corpus, 20, tmp_path / "a.pt", tmp_path / "a.log")  # 160 docs: 2nd epoch
    assert "resumed at step 6" in out
    whole = train(small_corpus, 20, tmp_path / "b.pt", tmp_path / "b.log")
    assert (tmp_path / "a.log").read_text() == (tmp_path / "b.log").read_text()
    assert out.splitlines()[-1] == whole.splitlines()[-1]  # same final loss, to the digit
    assert len((tmp_path / "a.log").read_text().splitlines()) == 160
