"""Ctrl-C at any instant of an ``owt`` command, its first second included (while the package
imports, before the command's handler is in place): exit status 130, "interrupted", no
traceback. The console entry point is ``openwebtext_cli.main``, outside the package."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_cli_hostile import kill_group, start

ENTRY = [sys.executable, "-m", "openwebtext_cli"]


def test_the_console_script_is_the_light_entry_point() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["owt"] == "openwebtext_cli:main"


def _loading(pid: int, library: str) -> bool:
    """Whether the process has mapped ``library`` (an extension module being imported)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return library in f.read()
    except OSError:
        return False


#: Moments in the package's imports (the first extension modules it loads), then later.
MOMENTS = [("_multiarray_umath", 0.0), ("_multiarray_umath", 0.1), ("_multiarray_umath", 0.2),
           ("_multiarray_umath", 0.4), ("_multiarray_umath", 1.5)]  # fmt: skip


@pytest.mark.parametrize(("library", "delay"), MOMENTS)
def test_ctrl_c_early_exits_130_without_a_traceback(
    small_corpus: Path, library: str, delay: float
) -> None:
    """The signal lands while the package imports (the interpreter's own start, before any
    code of ours runs, is not ours to handle: it is waited out by the library's mapping)."""
    # An endless stream: whenever the signal comes, the command is still running.
    proc = start([*ENTRY, "stream", str(small_corpus), "--epochs", "0", "-q"],
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _loading(proc.pid, library) and proc.poll() is None:
            assert time.monotonic() < deadline, f"{library} never loaded"
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = err.decode(errors="replace")
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "interrupted" in text


def test_the_entry_point_runs_the_command(small_corpus: Path) -> None:
    done = subprocess.run([*ENTRY, "stream", str(small_corpus), "-q", "--take", "3"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
