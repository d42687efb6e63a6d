"""Red team, session 29: a program whose loop (no ``with``) ends in an exception while a worker
is stuck where SIGTERM cannot stop it (stopped, or in an uninterruptible read) never exited:
the traceback held the iterator, so its pool was not closed before multiprocessing's exit
handler joined the workers with no deadline. Open pools are now closed at exit first (SIGTERM,
then SIGKILL two seconds later)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from support import child_pids

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from openwebtext import Loader, OpenWebTextLoader

    def body(docs):
        for k, _ in enumerate(docs):
            if k == 5:
                worker = _worker()
                os.kill(worker, signal.SIGSTOP)
                print("stopped", worker, flush=True)
                time.sleep(1.5)  # (stopped for good before the exit's SIGTERM)
                raise ValueError("an error in the training step")

    def _worker():
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            return int(f.read().split()[0])

    if sys.argv[2] == "loader":
        body(Loader(sys.argv[1], workers=2, shuffle_buffer=0, timeout=60).iter())
    else:
        body(OpenWebTextLoader(sys.argv[1], num_workers=2))
    """
)


@pytest.mark.parametrize("kind", ["loader", "reference"])
def test_an_exception_beside_a_stopped_worker_exits(
    small_corpus: Path, tmp_path: Path, kind: str
) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), str(small_corpus), kind],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        workers = child_pids(child.pid)
        for pid in [*workers, child.pid]:
            os.kill(pid, signal.SIGKILL)
        child.communicate()
        pytest.fail("the program did not exit: its stopped worker was joined for ever")
    assert "stopped" in out and "ValueError: an error in the training step" in err, err
    assert child.returncode == 1
    worker = int(out.split()[1])
    time.sleep(0.2)
    assert not Path(f"/proc/{worker}").exists() or "Z" in _state(worker)  # (killed)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return "Z"
