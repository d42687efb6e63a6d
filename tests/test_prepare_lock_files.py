"""The output lock is of a file, not of a name (issue 27, issue 31): a waiter that gets the
lock of a file its holder removed tries again on the file at the path; a run whose lock
file was removed while it held it (a temporary-file cleaner, ``rm .owt-*``) refuses to
commit, so that the folder never holds a meta.json that does not describe its files; a
thread re-enters a lock it holds (the Ray engine merges under its own output lock)."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, Progress, prepare
from openwebtext.prepare.lock import LOCK, hold
from openwebtext.prepare.workdir import sha256_file

OPTIONS = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)
WAIT = 60  # seconds: a bound on a wait that a working lock ends at once, never a pace


def _run(target: object) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_waiter_does_not_go_ahead_of_a_run_that_locked_the_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holds; B waits on A's file; A removes it and lets go; C creates and locks a new one
    before B looks again: B must wait for C, not go ahead beside it."""
    folder = tmp_path / "out"
    a_in, a_go = threading.Event(), threading.Event()
    b_waits, b_waits_again = threading.Event(), threading.Event()
    c_in, c_go = threading.Event(), threading.Event()
    c_holds = threading.Event()
    seen: dict[str, bool] = {}
    real_flock = fcntl.flock
    b_calls = []

    def run_a() -> None:
        with hold(folder):
            a_in.set()
            assert a_go.wait(WAIT)

    def run_c() -> None:
        with hold(folder):
            c_holds.set()
            c_in.set()
            assert c_go.wait(WAIT)
            c_holds.clear()

    def flock(fd: int, operation: int) -> None:
        if threading.current_thread().name != "B" or operation & fcntl.LOCK_NB:
            return real_flock(fd, operation)
        b_calls.append(operation)
        if len(b_calls) > 1:  # B waits again, on C's file
            b_waits_again.set()
            return real_flock(fd, operation)
        b_waits.set()
        real_flock(fd, operation)  # A's file, once A let go of it (and removed it)
        _run(run_c)  # C takes the folder before B looks at the path again
        assert c_in.wait(WAIT)
        return None

    def run_b() -> None:
        with hold(folder, wait=True):
            seen["c_held_the_folder"] = c_holds.is_set()

    monkeypatch.setattr(fcntl, "flock", flock)
    a = _run(run_a)
    assert a_in.wait(WAIT)
    b = threading.Thread(target=run_b, name="B", daemon=True)
    b.start()
    assert b_waits.wait(WAIT)
    a_go.set()
    a.join(WAIT)
    assert c_in.wait(WAIT)
    # B either went ahead (wrong) or waits on C's file: whichever comes first.
    while b.is_alive() and not b_waits_again.wait(0.01):
        pass
    c_go.set()
    b.join(WAIT)
    assert not b.is_alive()
    assert seen == {"c_held_the_folder": False}
    assert not (folder / LOCK).exists()


def test_a_thread_re_enters_the_lock_it_holds_and_another_thread_is_refused(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "out"
    refused: list[BaseException] = []

    def other_thread() -> None:
        try:
            with hold(folder):
                pass
        except PrepareError as exc:
            refused.append(exc)

    with hold(folder):
        with hold(folder):  # the Ray engine's merge, under its whole run's lock
            assert (folder / LOCK).exists()
        assert (folder / LOCK).exists()  # leaving the inner block keeps the lock
        thread = _run(other_thread)
        thread.join(WAIT)
        assert len(refused) == 1 and "in use by another run" in str(refused[0])
    assert not (folder / LOCK).exists()
    with hold(folder):  # free again, for any thread
        pass


class _Paused:
    """A run in a thread that stops after its first unit until released."""

    def __init__(self, corpus: Corpus, out: Path, restart: bool = False) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.thread = _run(lambda: self._run(corpus, out, restart))
        assert self.started.wait(WAIT), "the run did not start"

    def _progress(self, event: Progress) -> None:
        self.started.set()
        assert self.release.wait(WAIT)

    def _run(self, corpus: Corpus, out: Path, restart: bool) -> None:
        try:
            prepare(corpus, out, OPTIONS, progress=self._progress, restart=restart)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> BaseException | None:
        self.release.set()
        self.thread.join(WAIT)
        assert not self.thread.is_alive()
        return self.error


def _describes_its_files(out: Path) -> None:
    import json

    meta = json.loads((out / "meta.json").read_text())
    for name, info in meta["files"].items():
        assert (out / name).stat().st_size == info["bytes"], name
        assert sha256_file(out / name) == info["sha256"], name


def test_a_run_whose_lock_file_was_removed_does_not_commit(
    small_corpus: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open(small_corpus)
    out = tmp_path / "out"
    first = _Paused(corpus, out)
    (out / LOCK).unlink()  # a temporary-file cleaner
    second = _Paused(corpus, out, restart=True)  # gets in: the folder looks free
    error = first.finish()
    assert isinstance(error, PrepareError) and "was replaced" in str(error)
    assert not (out / "meta.json").exists()
    assert (out / LOCK).exists()  # the second run's lock is not the first's to remove
    assert second.finish() is None
    _describes_its_files(out)
    expected = prepare(corpus, tmp_path / "fresh", OPTIONS)
    again = prepare(corpus, out, OPTIONS)
    assert again.already and again.meta == expected.meta
    assert not (out / LOCK).exists()


def test_a_run_whose_lock_file_was_removed_and_the_folder_left_alone_refuses_too(
    small_corpus: Path, tmp_path: Path
) -> None:
    """Nobody can tell that no other run got in: the run stops, and the next one goes on."""
    corpus = Corpus.open(small_corpus)
    out = tmp_path / "out"
    first = _Paused(corpus, out)
    (out / LOCK).unlink()
    assert isinstance(first.finish(), PrepareError)
    assert not (out / "meta.json").exists()
    report = prepare(corpus, out, OPTIONS)
    assert report.resumed and not report.already
    _describes_its_files(out)
