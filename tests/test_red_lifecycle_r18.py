"""The worker pool's life against forks, the program's exit and Ctrl-C (red team, round 18).

- A process forked from one reading with workers, that then ended normally (``sys.exit``:
  its ``atexit`` ran), terminated the parent's workers: multiprocessing's exit handler took
  them for the fork's own children. The parent's next read failed with a ``WorkerError``
  blaming a healthy member (``exited with code -15``).
- The program's exit while a daemon thread was inside ``next()``: the exit's close tore the
  workers, pipes and selector out from under the reading thread, which printed tracebacks
  (a member blamed, ``OSError``, ``KeyError``, ``ValueError``) and spawned into the closed
  pool. A ``close()`` from another thread under a reading left the same.
- A Ctrl-C whose handler ran on the main thread while it started a worker (another thread got
  the signal; Python raises at the main thread's next bytecode): raised right after the fork,
  the worker was lost (a zombie and its pipes per Ctrl-C); raised inside another library's
  fork hook (``logging``'s), it was swallowed.
"""

from __future__ import annotations

import _thread
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext.engine import PoolOptions, open_pool, parent
from openwebtext.errors import WorkerError
from openwebtext.index import Corpus
from openwebtext.interrupts import Interrupted, interruptible

#: How long a test waits for a thread or a process it started (a bound, never for a race).
WAIT = 30.0


def _default_signals() -> None:
    # A child must see SIGINT as a terminal delivers it, whatever the test runner was given.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
        timeout=120, preexec_fn=_default_signals,
    )  # fmt: skip


def _children() -> dict[int, str]:
    """This process's children, zombies too: pid -> state."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:  # (gone meanwhile)
            continue
        state, ppid = stat[stat.rfind(")") + 2 :].split()[:2]
        if int(ppid) == os.getpid():
            found[int(entry)] = state
    return found


def _fds() -> set[int]:
    gc.collect()
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


# -- 1. a fork of a reading process ends ------------------------------------------------


FORK = """
    import os, sys
    from openwebtext import Loader

    corpus = {corpus!r}
    docs = Loader(corpus, workers=2, seed=0, epochs=None).iter()
    next(docs)
    for how in ("sys.exit", "os._exit", "its own loader"):
        pid = os.fork()
        if pid == 0:  # (a forked helper that never touches the parent's iterator)
            if how == "its own loader":
                with Loader(corpus, workers=2, seed=1).iter() as mine:
                    sys.exit(0 if sum(1 for _ in mine) == 120 else 3)
            if how == "os._exit":
                os._exit(0)
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print(how, "child:", os.waitstatus_to_exitcode(status), flush=True)
        for _ in range(300):  # (past the end of the 120 documents: units read anew)
            next(docs)
        print(how, "parent reads on", flush=True)
    docs.close()
"""


@pytest.mark.waits_on_workers
def test_a_forked_child_that_exits_leaves_the_parent_s_workers_alone(
    small_corpus: Path, tmp_path: Path
) -> None:
    done = _python(FORK.format(corpus=str(small_corpus)), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"{how} {what}" for how in ("sys.exit", "os._exit", "its own loader")
        for what in ("child: 0", "parent reads on")
    ]  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]


@pytest.mark.waits_on_workers
def test_a_fork_forgets_the_workers_in_multiprocessing_s_registry(small_corpus: Path) -> None:
    """What the fork's exit would have terminated: the parent's workers, listed as its own."""
    units = Corpus.open(small_corpus).units
    with parent.WorkerPool(units, PoolOptions(workers=2)) as pool:
        next(iter(pool.run(range(len(units)))))
        workers = {w.pid for w in pool._workers}
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            listed = {p.pid for p in multiprocessing.active_children()}
            os.write(write, " ".join(map(str, listed & workers)).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            seen = f.read()
        os.waitpid(pid, 0)
        assert len(workers) == 2 and {w.process.is_alive() for w in pool._workers} == {True}
    assert seen == ""


# -- 2. the program's exit, and a close, under a reading thread ----------------------------


EXIT = """
    import atexit, os, sys, threading

    reader = []
    # (registered first, run last: after the library's exit hook, what the reading thread
    # does then, within a bound, is seen; it waited in next() for the end, or said nothing)
    atexit.register(lambda: reader[0].join(2.0))

    from openwebtext import Loader
    from openwebtext.engine import child, parent

    inside, exiting, wait = threading.Event(), threading.Event(), parent.halting_wait
    child.read_unit = lambda *args: threading.Event().wait()  # (workers busy for ever)

    def halting_wait(seconds):
        # The reading thread, in the pool's wait for a unit: it goes on into the select once
        # the program's exit has begun (the exit's close then runs under it).
        if threading.current_thread() in reader and not inside.is_set():
            inside.set()
            exiting.wait(30)
        return wait(seconds)

    parent.halting_wait = halting_wait

    def consume():
        for doc in Loader({corpus!r}, workers=2, seed=0, epochs=None):
            pass

    def at_exit():  # (runs before the library's own hook, registered at its import)
        workers = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                   if _ppid(pid) == os.getpid()]
        print("workers", *workers, flush=True)
        exiting.set()

    def _ppid(pid):
        try:
            with open(f"/proc/{{pid}}/stat") as f:
                stat = f.read()
        except OSError:
            return None
        return int(stat[stat.rfind(")") + 2 :].split()[1])

    atexit.register(at_exit)
    reader.append(threading.Thread(target=consume, daemon=True))
    reader[0].start()
    assert inside.wait(30)
    print("main ends", flush=True)
"""


@pytest.mark.waits_on_workers
def test_the_exit_under_a_daemon_thread_inside_next_is_quiet_and_leaves_no_worker(
    small_corpus: Path, tmp_path: Path
) -> None:
    done = _python(EXIT.format(corpus=str(small_corpus)), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "main ends" and lines[1].startswith("workers"), lines
    workers = [int(pid) for pid in lines[1].split()[1:]]
    assert len(workers) == 2
    deadline = time.monotonic() + WAIT  # (the exit waited for them: reaped by now, or soon)
    while any(os.path.exists(f"/proc/{pid}") for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{pid}") for pid in workers)


@pytest.mark.waits_on_workers
def test_a_close_from_another_thread_ends_a_reading_with_the_pool_closed_error(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    units = Corpus.open(small_corpus).units
    inside, go, wait = threading.Event(), threading.Event(), parent.halting_wait
    reading: list[threading.Thread] = []

    def halting_wait(seconds: float) -> float:
        if threading.current_thread() in reading and not inside.is_set():
            inside.set()
            assert go.wait(WAIT)
        return wait(seconds)

    monkeypatch.setattr(parent, "halting_wait", halting_wait)
    pool = parent.WorkerPool(units, PoolOptions(workers=2))
    ended: list[BaseException] = []
    spawned = []
    add = pool._add_worker

    def add_worker() -> Any:
        spawned.append(1)
        return add()

    monkeypatch.setattr(pool, "_add_worker", add_worker)

    def read() -> None:
        try:
            for _ in pool.run(range(len(units))):
                pass
        except BaseException as exc:  # (what the test is about: how the reading ends)
            ended.append(exc)

    reading.append(threading.Thread(target=read))
    reading[0].start()
    try:
        assert inside.wait(WAIT)
        closer = threading.Thread(target=pool.close)
        closer.start()
        deadline = time.monotonic() + WAIT
        while not pool.closed and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        go.set()
        reading[0].join(WAIT)
    closer.join(WAIT)
    assert not closer.is_alive() and not reading[0].is_alive()
    assert len(ended) == 1
    assert isinstance(ended[0], WorkerError), repr(ended[0])
    assert str(ended[0]) == "this worker pool is closed"
    assert len(spawned) == 2  # (none into the closed pool)


# -- 3. a Ctrl-C while a worker starts ------------------------------------------------------


_AT_FORK: list[bool] = []


def _interrupt_in_a_fork_hook() -> None:
    if _AT_FORK:
        _AT_FORK.clear()
        _thread.interrupt_main()


os.register_at_fork(after_in_parent=_interrupt_in_a_fork_hook)


@pytest.fixture
def sigint_counted() -> Iterator[list[int]]:
    """SIGINT's handler raises ``KeyboardInterrupt`` as Python's does, and counts its runs."""
    runs: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        runs.append(signum)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, handler)
    try:
        yield runs
    finally:
        signal.signal(signal.SIGINT, before)


def _interrupt_right_after_the_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    fork, once = os.fork, [True]

    def forked() -> int:
        pid = fork()
        if pid and once:
            once.clear()
            _thread.interrupt_main()  # (as a SIGINT to another thread: raised at the next bytecode)
        return pid

    monkeypatch.setattr(os, "fork", forked)


@pytest.mark.waits_on_workers
@pytest.mark.parametrize("where", ["right after the fork", "in another library's fork hook"])
def test_a_ctrl_c_while_a_worker_starts_is_raised_once_and_leaves_nothing(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, sigint_counted: list[int], where: str
) -> None:
    units = Corpus.open(small_corpus).units
    children, fds = _children(), _fds()
    pool = open_pool(units, PoolOptions(workers=2))
    try:
        if where == "right after the fork":
            _interrupt_right_after_the_fork(monkeypatch)
        else:
            _AT_FORK.append(True)
        with pytest.raises(KeyboardInterrupt):
            next(iter(pool.run(range(len(units)))))
    finally:
        _AT_FORK.clear()
        monkeypatch.undo()
        pool.close()
    assert sigint_counted == [signal.SIGINT]
    assert _children().keys() - children.keys() == set()
    assert _fds() - fds == set()  # (none left open: one an earlier test left may close)


@pytest.mark.waits_on_workers
def test_a_ctrl_c_under_owt_s_handler_while_a_worker_starts_is_the_command_s_interrupt(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    units = Corpus.open(small_corpus).units
    children, fds = _children(), _fds()
    pool = open_pool(units, PoolOptions(workers=2))
    try:
        _interrupt_right_after_the_fork(monkeypatch)
        with interruptible(), pytest.raises(Interrupted):
            next(iter(pool.run(range(len(units)))))
    finally:
        monkeypatch.undo()
        pool.close()
    assert _children().keys() - children.keys() == set()
    assert _fds() - fds == set()  # (none left open: one an earlier test left may close)


# -- a reviewer's finds: the exit's close never leaves a thread waiting; a handler that
# -- raises while the handlers are swapped leaves none swapped ----------------------------

JOINED = """
import atexit, threading, time
reader = []
atexit.register(lambda: (reader[0].join(), print("joined", flush=True)))  # (runs after ours)
from openwebtext import Loader
def read():
    try:
        for _ in Loader({corpus!r}, workers=1, epochs=1000):
            time.sleep(0.001)
    finally:
        print("reader ends", flush=True)
reader.append(threading.Thread(target=read, daemon=True))
reader[0].start()
time.sleep(1.0)
print("main ends", flush=True)
"""


@pytest.mark.waits_on_workers
def test_an_exit_handler_that_joins_the_reading_thread_returns(
    small_corpus: Path, tmp_path: Path
) -> None:
    """The first fix parked the thread for ever: a handler joining it hung the exit."""
    done = _python(JOINED.format(corpus=str(small_corpus)), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["main ends", "reader ends", "joined"]
    assert "Traceback" not in done.stderr, done.stderr


SWAPPED = """
import os, signal
from openwebtext import Loader
class Preempted(Exception): pass
def on_term(signum, frame): raise Preempted()
signal.signal(signal.SIGTERM, on_term)
real = signal.getsignal
def getsignal(number):  # (SIGTERM lands right after SIGINT's handler was swapped)
    if number == signal.SIGTERM and getattr(real(signal.SIGINT), "__name__", "") == "hold":
        os.kill(os.getpid(), signal.SIGTERM)
    return real(number)
signal.getsignal = getsignal
try:
    for doc in Loader({corpus!r}, workers=1):
        pass
except Preempted:
    print("preempted", flush=True)
signal.getsignal = real
print("sigint", signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
try:
    os.kill(os.getpid(), signal.SIGINT)
    import time; time.sleep(1.0)
    print("swallowed", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.waits_on_workers
def test_a_handler_that_raises_while_a_worker_starts_leaves_no_handler_swapped(
    small_corpus: Path, tmp_path: Path
) -> None:
    done = _python(SWAPPED.format(corpus=str(small_corpus)), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["preempted", "sigint True", "interrupted"]
