"""Two runs into one output folder at once (issue 19): the second says at once which run
(pid, host) holds the folder, or waits for it (``wait=True``, ``--wait``); the lock of a
killed run is taken over by the next."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, Progress, outputs, prepare
from openwebtext.prepare.lock import LOCK

OPTIONS = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)


class _Holder:
    """A run in a thread that stops after its first unit until released."""

    def __init__(self, corpus: Corpus, out: str | Path) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(corpus, out))
        self.thread.start()
        assert self.started.wait(60), "the first run did not start"

    def _progress(self, event: Progress) -> None:
        self.started.set()
        assert self.release.wait(60)

    def _run(self, corpus: Corpus, out: str | Path) -> None:
        try:
            prepare(corpus, out, OPTIONS, progress=self._progress)
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.release.set()
        self.thread.join(60)
        assert self.error is None, self.error


@pytest.fixture
def holder_factory() -> Iterator[list[_Holder]]:
    holders: list[_Holder] = []
    yield holders
    for holder in holders:
        holder.release.set()
        holder.thread.join(60)


@pytest.fixture
def first(small_corpus: Path, tmp_path: Path, holder_factory: list[_Holder]) -> _Holder:
    """A first run into ``tmp_path/out``, stopped after its first unit until released."""
    holder = _Holder(Corpus.open(small_corpus), tmp_path / "out")
    holder_factory.append(holder)
    return holder


def test_a_second_run_is_refused_at_once_naming_the_first(
    small_corpus: Path, tmp_path: Path, first: _Holder
) -> None:
    corpus = Corpus.open(small_corpus)
    with pytest.raises(PrepareError, match=f"pid {os.getpid()} on {socket.gethostname()}"):
        prepare(corpus, tmp_path / "out", OPTIONS)
    first.finish()
    expected = prepare(corpus, tmp_path / "fresh", OPTIONS)
    again = prepare(corpus, tmp_path / "out", OPTIONS)
    assert again.already and again.meta == expected.meta
    assert not (tmp_path / "out" / LOCK).exists()


def test_with_wait_the_second_run_waits_for_the_first(
    small_corpus: Path, tmp_path: Path, first: _Holder
) -> None:
    corpus = Corpus.open(small_corpus)
    result: dict[str, object] = {}

    def second() -> None:
        result["report"] = prepare(corpus, tmp_path / "out", OPTIONS, wait=True)

    waiter = threading.Thread(target=second)
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and "report" not in result  # waiting, not failing
    first.finish()
    waiter.join(60)
    report = result["report"]
    assert getattr(report, "already", None) is True  # the first run did it


def test_two_runs_of_one_url_share_the_staging_folders_lock(
    small_corpus: Path, s3_endpoint: str, holder_factory: list[_Holder]
) -> None:
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    url = "s3://owt/locked/"
    try:
        first = _Holder(corpus, url)
        holder_factory.append(first)
        with pytest.raises(PrepareError, match=f"pid {os.getpid()}"):
            prepare(corpus, url, OPTIONS)
        first.finish()
        assert prepare(corpus, url, OPTIONS).already
    finally:
        outputs.remove(outputs.staging(url))


def test_the_lock_of_a_killed_run_is_taken_over(small_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from openwebtext.prepare.lock import hold\n"
        "with hold(Path(sys.argv[1])):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run([sys.executable, "-c", code, str(out)], timeout=60, check=False)
    assert killed.returncode == -signal.SIGKILL
    holder = json.loads((out / LOCK).read_text())  # left behind, naming a dead process
    with pytest.raises(ProcessLookupError):
        os.kill(holder["pid"], 0)
    report = prepare(Corpus.open(small_corpus), out, OPTIONS)
    assert not report.already and not (out / LOCK).exists()


def test_two_merges_of_one_remote_slice_share_its_local_copys_lock(
    small_corpus: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    """The local copy of a remote slice is one folder per URL: a merge reading it holds it,
    so that another merge of the same slice (into another output) neither reads a copy
    being written nor removes it under the first."""
    from openwebtext.prepare import merge
    from openwebtext.prepare.lock import hold

    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    urls = [f"s3://owt/shared-copy/{i}" for i in range(2)]
    for i, url in enumerate(urls):
        prepare(corpus, url, OPTIONS, shard=(i, 2))
    taken, release = threading.Event(), threading.Event()

    def other_merge() -> None:  # holds slice 1's copy as a merge reading it does
        with hold(outputs.staging(urls[1], "fetch")):
            taken.set()
            release.wait(60)

    other = threading.Thread(target=other_merge)
    other.start()
    try:
        assert taken.wait(60)
        with pytest.raises(
            PrepareError, match=f"owt-fetch-.* is in use by another run .pid {os.getpid()}"
        ):
            merge(urls, tmp_path / "out", storage=corpus.storage)
    finally:
        release.set()
        other.join(60)
    report = merge(urls, tmp_path / "out", storage=corpus.storage)
    assert report.meta["files"]["train.bin"]["bytes"] > 0
    assert [u for u in urls if outputs.staging(u, "fetch").exists()] == []
