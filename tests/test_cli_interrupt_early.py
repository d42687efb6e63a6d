"""Ctrl-C or SIGTERM at any instant of an ``owt`` command, its first second included (while the
package imports, before the command's handler is in place): exit status 130 or 143,
"interrupted" or "terminated", no traceback, and a resumed stream's ``--state-out`` written.
The console entry point is ``openwebtext_cli.main``, outside the package (SIGTERM there killed
the process by the signal until session 37, writing no state)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openwebtext import cli
from support import hang_report
from test_cli_hostile import kill_group, start

ENTRY = [sys.executable, "-m", "openwebtext_cli"]


def test_the_console_script_is_the_light_entry_point() -> None:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads TOML")
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


#: Each signal, its exit status and its word.
SIGNALS = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated")}


def _signal_early(argv: list[str], library: str, delay: float, signum: int) -> tuple[int, str]:
    """Run ``owt argv``, send ``signum`` ``delay`` s after it mapped ``library``: its exit
    status and standard error."""
    # (a hang names where: each process's stacks, printed on SIGABRT by faulthandler)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    proc = start([*ENTRY, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while not _loading(proc.pid, library) and proc.poll() is None:
            assert time.monotonic() < deadline, f"{library} never loaded"
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired as exc:
            said = (exc.stderr or b"").decode(errors="replace")  # (what communicate read)
            pytest.fail(f"no end 60 s after the signal:\n{said}"
                        f"{hang_report(proc.pid, proc.stderr)}")
    finally:
        if proc.poll() is None:
            kill_group(proc)
    return proc.returncode, err.decode(errors="replace")


@pytest.mark.parametrize("signum", list(SIGNALS))
@pytest.mark.parametrize(("library", "delay"), MOMENTS)
def test_a_signal_early_exits_as_later_without_a_traceback(
    small_corpus: Path, library: str, delay: float, signum: int
) -> None:
    """The signal lands while the package imports (the interpreter's own start, before any
    code of ours runs, is not ours to handle: it is waited out by the library's mapping)."""
    # An endless stream: whenever the signal comes, the command is still running.
    code, text = _signal_early(["stream", str(small_corpus), "--epochs", "0", "-q"], library,
                               delay, signum)  # fmt: skip
    assert (code, "Traceback" in text) == (SIGNALS[signum][0], False), text
    assert SIGNALS[signum][1] in text


@pytest.mark.parametrize("signum", list(SIGNALS))
def test_a_resumed_stream_signalled_as_it_loads_writes_its_state_out(
    small_corpus: Path, tmp_path: Path, signum: int
) -> None:
    """``--state-out`` is the state resumed from, as it was: nothing was read."""
    first, out = tmp_path / "a.json", tmp_path / "b.json"
    assert cli.main(["stream", str(small_corpus), "-q", "--take", "7", "--state-out",
                     str(first)]) == 0  # fmt: skip
    code, text = _signal_early(["stream", str(small_corpus), "--epochs", "0", "-q", "--resume",
                                str(first), "--state-out", str(out)], "_multiarray_umath", 0.1,
                               signum)  # fmt: skip
    assert code == SIGNALS[signum][0], text
    assert json.loads(out.read_text()) == json.loads(first.read_text())


#: ``owt stream``, a signal sent as the command sets up (after the package loaded, before its
#: handler is in place: the instant the entry point used to unblock the signals in). The
#: patch is made as the package loads, inside the entry point's hold: a thread a library
#: starts as it loads (OpenBLAS's) takes a signal its mask leaves open.
_BETWEEN = """
import importlib.abc, importlib.util, os, sys

class Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "openwebtext.cli.command":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            real = module.open_standard_streams

            def signalled():
                os.kill(os.getpid(), {signum})
                return real()

            module.open_standard_streams = signalled

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Patch())
import openwebtext_cli
sys.argv = ["owt", "stream", {corpus!r}, "--epochs", "0", "-q"]
sys.exit(openwebtext_cli.main())
"""


@pytest.mark.parametrize("signum", list(SIGNALS))
def test_a_signal_between_the_load_and_the_handler_ends_as_later(
    small_corpus: Path, signum: int
) -> None:
    """(SIGTERM there ended the process by the signal itself: -15, no word, no state.)"""
    proc = start([sys.executable, "-c", _BETWEEN.format(signum=int(signum),
                                                        corpus=str(small_corpus))],
                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    text = err.decode(errors="replace")
    assert (proc.returncode, "Traceback" in text) == (SIGNALS[signum][0], False), text
    assert SIGNALS[signum][1] in text


def test_the_entry_point_runs_the_command(small_corpus: Path) -> None:
    done = subprocess.run([*ENTRY, "stream", str(small_corpus), "-q", "--take", "3"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("signum", list(SIGNALS))
def test_a_signal_the_caller_ignores_stays_ignored_while_owt_loads(
    tmp_path: Path, signum: int
) -> None:
    """(A first version of the hold took an ignored signal that came then, and ended.)"""
    out = tmp_path / "c"

    def ignoring() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signum, signal.SIG_IGN)

    proc = subprocess.Popen([*ENTRY, "synth", str(out), "--subsets", "1", "--members", "2",
                             "--docs", "5", "-j", "1", "-q"], preexec_fn=ignoring,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _loading(proc.pid, "_multiarray_umath") and proc.poll() is None:
            assert time.monotonic() < deadline, "numpy never loaded"
            time.sleep(0.002)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert proc.returncode == 0, err.decode(errors="replace")
    assert "urlsf_subset00.tar" in {p.name for p in out.iterdir()}
