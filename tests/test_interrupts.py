"""The commands' signal handling (interrupts.py) and the processes a command forks."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from openwebtext.interrupts import Interrupted, deferred, interruptible

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _sleep_then_report(seconds: float) -> None:
    time.sleep(seconds)


def _forked_child_exit_code(signum: int) -> int | None:
    """Fork a multiprocessing child inside ``interruptible()``, send it ``signum``."""
    ctx = multiprocessing.get_context("fork")
    with interruptible():
        child = ctx.Process(target=_sleep_then_report, args=(30,))
        child.start()
        try:
            time.sleep(0.3)  # let it reach its sleep
            os.kill(child.pid, signum)  # type: ignore[arg-type]
            child.join(10)
        finally:
            if child.is_alive():
                child.kill()
                child.join()
    return child.exitcode


def test_a_forked_child_dies_of_sigterm_as_if_no_command_had_taken_it() -> None:
    # The bench's ceiling pool hung here: its worker raised Interrupted (the command's
    # handler, inherited by fork) inside Pool's queue code instead of dying.
    assert _forked_child_exit_code(signal.SIGTERM) == -signal.SIGTERM


def _exit_with_what_sigterm_does() -> None:
    handler = signal.getsignal(signal.SIGTERM)
    os._exit(0 if handler == signal.SIG_DFL else 3)


def test_a_forked_child_starts_with_the_signals_it_had_before_the_command() -> None:
    # At the C level, from the first instruction: a Python-level handler that re-sends the
    # signal is not enough, since it never runs while the child blocks in a semaphore (the
    # signal lands just before sem_wait) — the hang the bench's ceiling pool had.
    ctx = multiprocessing.get_context("fork")
    with interruptible():
        child = ctx.Process(target=_exit_with_what_sigterm_does)
        child.start()
        child.join(10)
    assert child.exitcode == 0


def test_a_forked_child_gets_sigint_as_the_process_had_it_before() -> None:
    # Set explicitly: a test run started in the background has SIGINT ignored.
    # SIG_DFL before the command: the child dies of the signal. Python's default handler
    # before: KeyboardInterrupt, which a multiprocessing child reports as exit code 1.
    started_with = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        assert _forked_child_exit_code(signal.SIGINT) == -signal.SIGINT
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert _forked_child_exit_code(signal.SIGINT) == 1
    finally:
        signal.signal(signal.SIGINT, started_with)


def test_the_command_itself_still_gets_interrupted() -> None:
    with pytest.raises(Interrupted) as caught, interruptible():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert caught.value.signum == signal.SIGTERM
    assert deferred.owner is None  # handlers and their owner put back


def test_nested_interruptible_keeps_what_the_signal_did_first() -> None:
    with interruptible(), interruptible():
        assert deferred.previous[signal.SIGTERM] == signal.SIG_DFL
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
