"""Two runs into one output folder, through the commands (issue 19): the second stops at once
naming the holder, or with ``--wait`` waits for it and then finishes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from openwebtext.prepare import lock_output


def owt(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "openwebtext.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_a_second_tokenize_stops_at_once_or_waits(small_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with lock_output(out):  # another run holds the folder
        started = time.monotonic()
        refused = owt("tokenize", str(small_corpus), "--out", str(out), "-j", "1", "-q")
        _, err = refused.communicate(timeout=60)
        assert refused.returncode == 1, err
        assert f"pid {os.getpid()}" in err and "Traceback" not in err
        assert time.monotonic() - started < 30  # at once, not after the run
        waiting = owt("tokenize", str(small_corpus), "--out", str(out), "-j", "1", "-q", "--wait")
        time.sleep(3)
        assert waiting.poll() is None  # still waiting for the lock
    _, err = waiting.communicate(timeout=100)
    assert waiting.returncode == 0, err
    assert (out / "train.bin").is_file() and (out / "meta.json").is_file()
