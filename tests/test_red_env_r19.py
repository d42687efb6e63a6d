"""Red team of session 41, the environment a process runs in.

- A container's user the system does not know, with no ``$HOME`` (OpenShift runs images so;
  HPC nodes whose user lookup fails): every corpus open asked pathlib for the home folder, for
  a cache it can do without, and died with pathlib's ``RuntimeError: Could not determine home
  directory``.
- Python 3.12 warns at a fork in a process with threads: the read-ahead's thread starts the
  pool's workers, pyarrow and tqdm leave threads running. The warning named our code, and under
  ``-W error`` it was an error at the worker's start.
- Python 3.12 forks no more once the main thread has ended: a program whose thread reads on
  after its main thread returned got multiprocessing's raw ``RuntimeError: can't fork at
  interpreter shutdown`` at the first worker's start (found by the suite run on 3.12).
"""

from __future__ import annotations

import os
import pwd
import shutil
import warnings
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader, WorkerError, cli
from openwebtext.files import cache_root
from openwebtext.synth import default_corpus, write_corpus


@pytest.fixture
def homeless(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``$HOME``, no ``$OWT_CACHE_DIR``, and a user ``pwd`` does not know."""

    def unknown(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("OWT_CACHE_DIR", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    with pytest.raises(RuntimeError):
        Path.home()  # (the environment the test means)


def test_a_corpus_is_read_and_counted_beside_itself_with_no_home(
    homeless: None, small_corpus: Path, tmp_path: Path
) -> None:
    corpus = shutil.copytree(small_corpus, tmp_path / "c")
    with Loader(corpus, workers=0, seed=1).iter() as docs:
        assert sum(1 for _ in docs) == 120
    sharded = Loader(corpus, workers=0, seed=1, rank=1, world_size=2)  # (its counts are needed)
    with sharded.iter() as docs:
        assert sum(1 for _ in docs) == 60
    assert Corpus.open(corpus).counts_paths() == [
        corpus / f".owt-counts-{Corpus.open(corpus).fingerprint()}.json"
    ]
    assert Corpus.open(corpus).load_counts() is not None  # (kept beside it: none elsewhere)


def test_owt_stream_runs_with_no_home(
    homeless: None, small_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["stream", str(small_corpus), "--take", "3", "--jsonl", "-j", "0"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_with_no_home_the_cache_folder_is_said_to_be_set(homeless: None) -> None:
    with pytest.raises(OSError, match="OWT_CACHE_DIR"):
        cache_root()
    with pytest.raises(OSError, match="OWT_CACHE_DIR"):
        default_corpus(progress=False)  # (the built-in corpus is kept in the cache folder)


def test_a_fork_in_a_process_with_threads_is_no_error_under_w_error(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.fork

    def fork_as_3_12_does() -> int:  # (CPython 3.12+ warns so in a process with threads)
        said = f"This process (pid={os.getpid()}) is multi-threaded, use of fork() may lead to "
        warnings.warn(said + "deadlocks in the child.", DeprecationWarning, stacklevel=2)
        return real()

    monkeypatch.setattr(os, "fork", fork_as_3_12_does)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Loader(small_corpus, workers=2, seed=1).iter() as docs:
            assert sum(1 for _ in docs) == 120
        write_corpus(tmp_path / "made", subsets=1, members=3, docs=2, seed=0, workers=2)
    assert (tmp_path / "made" / "urlsf_subset00.tar").is_file()


def test_a_fork_refused_at_the_program_s_exit_says_what_to_do(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def at_shutdown() -> int:  # (CPython 3.12+, once the main thread has ended)
        raise RuntimeError("can't fork at interpreter shutdown")

    monkeypatch.setattr(os, "fork", at_shutdown)
    with (
        pytest.raises(WorkerError, match=r"main thread has ended.*join the thread that reads"),
        Loader(small_corpus, workers=2, seed=1).iter() as docs,
    ):
        next(docs)
