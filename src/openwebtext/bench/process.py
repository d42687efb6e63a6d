"""Running one child in its own session and measuring it (:func:`run_child`).

Measured per run, by this (parent) process:

- wall seconds, from spawn to exit;
- CPU seconds, user + system, of the child and every descendant it waited for
  (``os.wait4``);
- peak memory: the largest sum of PSS over the child's process group, sampled every
  0.1 s (shared pages counted once), and the largest single process's peak RSS
  (``ru_maxrss``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from openwebtext.bench.common import OK, STARTED_ENV, TIMEOUT, now
from openwebtext.interrupts import deferred

#: How often the memory of a running child's process group is sampled.
SAMPLE_SECONDS = 0.1


@dataclass(frozen=True)
class Finished:
    """How one child process ended and what it cost."""

    status: str
    """``ok``, or ``timeout`` (killed after the timeout)."""
    exit_code: int | None
    wall_s: float
    cpu_s: float
    peak_pss_bytes: int
    max_rss_bytes: int
    stdout: str
    stderr_tail: str


def _group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``, from /proc (empty where there is none)."""
    pids = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


def _pss_bytes(pid: int) -> int:
    """Proportional set size of ``pid`` (0 if it is gone or the kernel cannot say)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _kill_group(pgid: int) -> None:
    # Also after a normal exit: a straggler left behind would slow the next measurement.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux >= 5.3: poll instead
        return None


def _watch(pid: int, deadline: float) -> tuple[int | None, resource.struct_rusage | None, int]:
    """Wait for ``pid`` until ``deadline``, sampling its group's memory.

    Returns:
        (wait status or None on timeout, its rusage or None, peak summed PSS in bytes).
    """
    pidfd = _pidfd(pid)
    peak = 0
    try:
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, usage, peak
            peak = max(peak, sum(_pss_bytes(p) for p in _group_pids(pid)))
            wait = min(SAMPLE_SECONDS, deadline - now())
            if wait <= 0:
                return None, None, peak
            if pidfd is None:
                time.sleep(wait)
            else:
                # Readable when the child exits: the wall time is not rounded up to a sample.
                select.select([pidfd], [], [], wait)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _tail(data: bytes, lines: int = 10) -> str:
    text = data.decode(errors="replace").replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-lines:])


def run_child(
    command: Sequence[str] | str, timeout: float, env: dict[str, str] | None = None
) -> Finished:
    """Run a command in its own session and measure it.

    The whole process group is killed with SIGKILL when the command ends, times out, or
    this process is interrupted, so nothing it started is left running.

    Args:
        command: An argv, or a string to run through ``/bin/sh``.
        timeout: Seconds before the command is killed and reported as ``timeout``.
        env: Variables to add to this process's environment for the command.

    Returns:
        Its status, exit code, wall and CPU seconds, peak memory, stdout and end of stderr.
    """
    # Files, not pipes: a chatty child (a progress bar) can never block on a full pipe.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = {**os.environ, **(env or {}), STARTED_ENV: repr(now())}
        start = now()
        proc: subprocess.Popen[bytes] | None = None
        try:
            # A signal that arrives inside Popen (after the fork, before it returns) would
            # leave a child that no ``finally`` knows of: it is held until ``proc`` is set.
            with deferred:
                proc = subprocess.Popen(
                    command,
                    shell=isinstance(command, str),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=env,
                    start_new_session=True,
                )
            status, usage, peak = _watch(proc.pid, start + timeout)
            wall = now() - start
            if status is not None:
                proc.returncode = os.waitstatus_to_exitcode(status)  # reaped by _watch
        finally:
            if proc is not None:
                _kill_group(proc.pid)
                if proc.returncode is None:
                    proc.wait()
        out.seek(0)
        err.seek(0)
        return Finished(
            status=TIMEOUT if usage is None else OK,
            exit_code=None if usage is None else proc.returncode,
            wall_s=wall,
            cpu_s=0.0 if usage is None else usage.ru_utime + usage.ru_stime,
            peak_pss_bytes=peak,
            max_rss_bytes=0 if usage is None else usage.ru_maxrss * 1024,
            stdout=out.read().decode(errors="replace"),
            stderr_tail=_tail(err.read()),
        )
