"""The tests that send SIGINT start their children with SIGINT at its default, as a
terminal would, even when the test run itself was started with SIGINT ignored (a
background job of a shell script: ``pytest &``); otherwise the child ignores the signal
and the test times out."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from test_bench_run import start_bench
from test_cli_hostile import kill_group, sigint_default, start
from test_cli_signals import start_in_session

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def sigint_ignored_in(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        (mask,) = (line.split()[1] for line in f if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


@pytest.fixture
def started_in_the_background() -> Iterator[None]:
    """This process as a background job of a shell starts: SIGINT ignored."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def child(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> Iterator[int]:
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.usefixtures("started_in_the_background")
def test_a_plain_child_would_ignore_sigint() -> None:
    """The trap itself: what the helpers below must undo."""
    with child(subprocess.Popen(SLEEP)) as pid:
        assert sigint_ignored_in(pid)


@pytest.mark.usefixtures("started_in_the_background")
def test_the_signal_tests_children_take_sigint() -> None:
    proc = start(SLEEP)
    try:
        assert not sigint_ignored_in(proc.pid)  # test_cli_hostile's signal tests
    finally:
        kill_group(proc)
    with child(start_bench(SLEEP)) as pid:  # test_bench_run's Ctrl-C test
        assert not sigint_ignored_in(pid)
    with sigint_default(), child(subprocess.Popen(SLEEP)) as pid:  # support.interrupt_owt
        assert not sigint_ignored_in(pid)
    with child(start_in_session(SLEEP)) as pid:  # test_cli_signals' Ctrl-C tests
        assert not sigint_ignored_in(pid)
