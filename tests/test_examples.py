"""The examples: stopping and resuming trains on exactly the same data, to the same loss."""

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


@pytest.mark.slow  # trains a small model twice: its own CI step
def test_interrupted_training_sees_the_same_documents(indexed: Path, tmp_path: Path) -> None:
    train(indexed, 6, tmp_path / "a.pt", tmp_path / "a.log")
    out = train(indexed, 20, tmp_path / "a.pt", tmp_path / "a.log")  # 160 docs: 2nd epoch
    assert "resumed at step 6" in out
    whole = train(indexed, 20, tmp_path / "b.pt", tmp_path / "b.log")
    assert (tmp_path / "a.log").read_text() == (tmp_path / "b.log").read_text()
    assert out.splitlines()[-1] == whole.splitlines()[-1]  # same final loss, to the digit
    assert len((tmp_path / "a.log").read_text().splitlines()) == 160


GPT = EXAMPLE.with_name("train_gpt.py")
TINY_GPT = [
    *("--steps", "12", "--seq-len", "32", "--batch-size", "4", "--layers", "1", "--width", "32"),
    *("--eval-every", "4", "--eval-batches", "2", "--val-fraction", "0.1", "--num-workers", "2"),
]


def train_gpt(corpus: Path, checkpoint: Path, log: Path, *extra: str) -> list[str]:
    files = ["--checkpoint", str(checkpoint), "--log", str(log)]
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(GPT), str(corpus), *TINY_GPT, *files, *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.slow  # trains a small model twice: its own CI step
def test_gpt_interrupted_and_resumed_reaches_the_same_loss(
    indexed: Path, tmp_path: Path
) -> None:
    pytest.importorskip("tiktoken")
    torch = pytest.importorskip("torch")
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    # Interrupted after step 6: the last checkpoint is step 4's, so steps 5 and 6 are redone.
    first = train_gpt(indexed, a, tmp_path / "a.log", "--interrupt-at", "6")
    assert first[-1] == "interrupted after step 6"
    assert torch.load(a, weights_only=False)["step"] == 4
    before = (tmp_path / "a.log").read_text().splitlines()
    assert [line.split()[0] for line in before] == ["1", "2", "3", "4", "5", "6"]
    resumed = train_gpt(indexed, a, tmp_path / "a.log")
    assert resumed[0] == "resumed at step 4"
    whole = train_gpt(indexed, b, tmp_path / "b.log")

    losses = (tmp_path / "a.log").read_text().splitlines()
    assert before[4:6] == losses[4:6]  # the redone steps repeat their losses exactly
    # The log was cut back to the checkpoint's step: each step once, as in one run.
    assert losses == (tmp_path / "b.log").read_text().splitlines()
    assert len(losses) == 12
    # Every evaluation and the final loss, to the last digit; the same weights.
    assert [x for x in resumed if "val loss" in x] == [x for x in whole if "val loss" in x][1:]
    assert resumed[-1] == whole[-1] and resumed[-1].startswith("step 12: ")
    model_a = torch.load(a, weights_only=False)["model"]
    model_b = torch.load(b, weights_only=False)["model"]
    assert all(torch.equal(model_a[k], model_b[k]) for k in model_b)
