"""The examples: stopping and resuming trains on exactly the same data, to the same loss."""

from __future__ import annotations

import re
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
    *("--checkpoint-every", "4"),
]


def train_gpt(
    corpus: Path, checkpoint: Path, log: Path, *extra: str, size: list[str] = TINY_GPT
) -> list[str]:
    files = ["--checkpoint", str(checkpoint), "--log", str(log)]
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(GPT), str(corpus), *size, *files, *extra],
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


def test_gpt_help_shows_every_default() -> None:
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(GPT), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # argparse wraps lines
    for default in ("(default: 300)", "(default: 0.003)", "(default: gpt-ckpt.pt)"):
        assert default in text
    assert "--layers LAYERS transformer blocks (default: 2)" in text


@pytest.mark.slow  # trains a small model: its own CI step
def test_gpt_short_run_saves_before_its_end(indexed: Path, tmp_path: Path) -> None:
    """Without --checkpoint-every, a run of 8 steps (--eval-every 50) still saves every
    8 // 4 = 2 steps, so an interruption after step 7 keeps step 6; val losses are rounded."""
    pytest.importorskip("tiktoken")
    torch = pytest.importorskip("torch")
    short = [*TINY_GPT[: TINY_GPT.index("--eval-every")], "--steps", "8"]
    short += ["--eval-batches", "2", "--val-fraction", "0.1", "--num-workers", "0"]
    lines = train_gpt(indexed, tmp_path / "a.pt", tmp_path / "a.log", "--interrupt-at", "7",
                      size=short)  # fmt: skip
    assert lines[-1] == "interrupted after step 7"
    assert torch.load(tmp_path / "a.pt", weights_only=False)["step"] == 6
    finished = train_gpt(indexed, tmp_path / "a.pt", tmp_path / "a.log", size=short)
    assert finished[0] == "resumed at step 6"
    assert re.fullmatch(r"step 8: loss \d+\.\d{4}, val loss \d+\.\d{4} \(checkpoint saved\)",
                        finished[-1]), finished[-1]  # fmt: skip
