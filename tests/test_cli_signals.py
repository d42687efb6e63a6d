"""Signals and vanished consumers: ``owt stream`` under SIGINT / SIGTERM, and workers whose
consumer dies. (Reliability, issue #5.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext import (
    Loader,
)
from support import (
    HANG_BOUND,
    MIDDLE,
    Members,
    all_but,
    child_pids,
    gone,
    group_pids,
    pipe_bytes,
    ready_for_signals,
    run,
    wait_until,
)
from test_cli_hostile import kill_group

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- signals and vanished consumers --------------------------------------------------------


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process, as in a program started from a
    terminal: a test run started as a background job has it ignored, and Python then
    installs no handler (the signal raised below would do nothing)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_in_a_program_stops_the_workers(small_corpus: Path) -> None:
    """SIGINT in a consumer's own loop: KeyboardInterrupt, and the with-block stops the workers."""
    with pytest.raises(KeyboardInterrupt), Loader(str(small_corpus), workers=2).iter() as it:
        for k, _ in enumerate(it):
            assert len(child_pids()) == 2
            if k == 10:
                signal.raise_signal(signal.SIGINT)
    assert child_pids() == []


#: ``owt`` with ``Reader.read`` hanging on one member: argv = marker member owt-args...
HANGING_OWT = """
import os, sys, threading, time
from pathlib import Path
from openwebtext import cli
from openwebtext.engine.read import Reader
marker, member = Path(sys.argv[1]), sys.argv[2]
real = Reader.read
def read(self, unit):
    if unit.member.endswith(member):
        part = marker.with_suffix(".part")  # whole when it appears: the test reads the pid
        part.write_text(str(os.getpid()))
        os.replace(part, marker)
        time.sleep(3600)
    return real(self, unit)
Reader.read = read
if sys.argv[3] == "stream":
    sys.exit(cli.main(sys.argv[3:]))
# The library, first iterated on a thread that is not the main one: the workers it forks
# watch their parent (the kernel's PR_SET_PDEATHSIG fires when the forking thread ends).
from openwebtext import Loader
it = Loader(sys.argv[4], workers=2, shuffle=False, shuffle_buffer=0).iter()
reading = threading.Thread(target=lambda: sum(1 for _ in it))
reading.start()
reading.join()  # (Python 3.12+ forks no more once the main thread has ended)
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_in_session(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its process group is ours to signal and check), with
    SIGINT at its default: a test run started in the background has it ignored, and an
    ignored signal stays ignored in the child (which then never sees the Ctrl-C sent)."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=_default_sigint, **popen)


def _owt(*args: str, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``owt`` as ``start_in_session`` does."""
    return start_in_session([sys.executable, "-m", "openwebtext.cli", *args], **popen)


def _under_way(proc: subprocess.Popen[bytes]) -> bool:
    """owt and its 2 workers are ready for a signal, and its first lines are in the pipe."""
    assert proc.stdout is not None
    return ready_for_signals(proc.pid, 3) and pipe_bytes(proc.stdout.fileno()) > 0


@pytest.mark.parametrize("policy", ["raise", "skip"])
@pytest.mark.parametrize("target", ["group", "main"])
def test_sigint_stops_owt_stream(
    target: str, policy: str, small_corpus: Path, pristine: Members
) -> None:
    """Ctrl-C (to the process group, or to owt alone): exit 130, one line, no traceback."""
    # --jsonl into a pipe nobody reads: owt blocks mid-stream with its workers alive.
    proc = _owt(
        "stream", str(small_corpus), "-j", "2", "--jsonl", "--shuffle-buffer", "0",
        "--on-error", policy, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert wait_until(lambda: _under_way(proc), 60), "owt did not start"
        (os.killpg if target == "group" else os.kill)(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=HANG_BOUND)
    finally:
        kill_group(proc)  # (its pipes closed too)
    assert proc.returncode == 130
    text = err.decode()
    assert "Traceback" not in text
    assert text.rstrip().endswith("interrupted")
    assert re.search(r"^\d+ documents, ", text, re.M)
    assert gone(proc.pid) == []
    # Whole records only (an interrupted write may drop some, never garble one).
    delivered = [json.loads(line) for line in out.split(b"\n") if line]
    texts = all_but(pristine)
    assert all(texts[r["name"]] == r["text"] for r in delivered)
    assert run(small_corpus, workers=2).docs == texts  # and the next run works


def test_sigint_while_a_worker_hangs(small_corpus: Path, tmp_path: Path) -> None:
    """Ctrl-C while a worker is stuck in a member: the stuck worker is killed too."""
    marker = tmp_path / "hanging"
    proc = start_in_session(
        [sys.executable, "-c", HANGING_OWT, str(marker), MIDDLE[1].rsplit("/")[-1],
         "stream", str(small_corpus), "-j", "2", "-q", "--no-shuffle"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert wait_until(marker.exists, 60), "the worker never reached the member"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_BOUND)
    finally:
        kill_group(proc)  # (its pipes closed too)
    assert proc.returncode == 130, err.decode()
    assert "Traceback" not in err.decode() and "interrupted" in err.decode()
    assert gone(proc.pid) == []


def test_sigterm_ends_owt_stream_and_its_workers(small_corpus: Path) -> None:
    """SIGTERM, as SIGINT: owt stops its workers and exits 143, even blocked on a pipe
    nobody reads (it gives the reader ``GRACE_SECONDS`` to take the line being written)."""
    proc = _owt(
        "stream", str(small_corpus), "-j", "2", "--jsonl", "--shuffle-buffer", "0",
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert wait_until(lambda: _under_way(proc), 60), "owt did not start"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=HANG_BOUND) == 143
        assert gone(proc.pid) == []
    finally:
        kill_group(proc)  # (its pipes closed too)
        assert proc.stdout is not None
        proc.stdout.close()


@pytest.fixture(scope="module", params=["owt", "a library thread"])
def consumer_killed(
    small_corpus: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict[str, bool]:
    """SIGKILL an ``owt stream`` whose worker 1 hangs (worker 0 idle), or a program reading
    with a ``Loader`` first iterated on a thread of its own; who is alive 3 s later?"""
    marker = tmp_path_factory.mktemp("consumer-killed") / "hanging"
    args = ["stream", str(small_corpus), "-j", "2", "-q", "--no-shuffle"]
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_OWT, str(marker), MIDDLE[1].rsplit("/")[-1],
         *(args if request.param == "owt" else ["loader", str(small_corpus)])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_until(marker.exists, 60), "the worker never reached the member"
        workers = [pid for pid in group_pids(proc.pid) if pid != proc.pid]
        hung = int(marker.read_text())
        assert hung in workers and len(workers) == 2
        (idle,) = set(workers) - {hung}
        # Worker 0 reads its other units, then waits for more (asleep on its task pipe).
        assert wait_until(lambda: _state(idle) == "S", 60), "worker 0 never went idle"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        alive = set(gone(proc.pid, HANG_BOUND))  # a bound on the wait, not a pace
        return {"hung": hung in alive, "idle": bool(alive - {hung})}
    finally:
        kill_group(proc)  # (its pipes closed too)
        gone(proc.pid)


def _state(pid: int) -> str:
    """``pid``'s state letter in /proc (R running, S asleep, ...; "" once gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_idle_worker_exits_when_its_consumer_dies(consumer_killed: dict[str, bool]) -> None:
    """An idle worker sees EOF on its task pipe (no sibling holds it open) and exits."""
    assert not consumer_killed["idle"]


def test_hung_worker_dies_with_its_consumer(consumer_killed: dict[str, bool]) -> None:
    """A worker stuck inside a member dies with its consumer (SIGKILL, OOM killer)."""
    assert not consumer_killed["hung"]
