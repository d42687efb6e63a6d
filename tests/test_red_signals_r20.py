"""An exception a signal's handler raises inside the library's frames (a SIGTERM handler's
``sys.exit``, Ctrl-C): the state after it resumes exactly after the last item the loop got.

Each test raises at one place the red team of session 42 found, by patching a call made there
(what a handler does: an exception at that instant), or by sending a real signal there.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import openwebtext as owt
from openwebtext.engine import raw
from openwebtext.stream import readahead
from openwebtext.stream import stream as stream_module
from openwebtext.stream.source import Packer
from openwebtext.synth import write_corpus
from support import child_pids


class Stop(BaseException):
    """What a handler raises (``SystemExit`` and ``KeyboardInterrupt`` are ``BaseException``)."""


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("signals")
    write_corpus(folder / "a", subsets=2, members=3, docs=5, seed=0)
    write_corpus(folder / "b", subsets=1, members=2, docs=5, seed=1)
    return folder / "a", folder / "b"


def _key(item: Any) -> Any:
    if isinstance(item, np.ndarray):
        return item.tobytes()
    return getattr(item, "source", None), item.member, item.name


def _raising_once(real: Callable[..., Any], at: int = 1, after: bool = False) -> Any:
    """``real``, raising ``Stop`` at its ``at``-th call (``after``: once that call returned)."""
    calls = [0]

    def patched(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == at and not after:
            raise Stop()
        out = real(*args, **kwargs)
        if calls[0] == at:
            raise Stop()
        return out

    return patched


def _interrupted_then_resumed(make: Callable[..., Any], patch: Callable[[], None]) -> None:
    """Run ``make()`` whole; again with ``patch`` in force until ``Stop``; then from the state
    taken after it: the items after those the loop got, exactly."""
    with make() as whole:
        expected = [_key(x) for x in whole]
    got: list[Any] = []
    patch()
    it = make()
    with pytest.raises(Stop):
        for item in it:
            got.append(_key(item))
    state = it.state_dict()
    it.close()
    with make(state) as rest:
        assert got + [_key(x) for x in rest] == expected
    assert got, "the exception came before any item: the test tests nothing"


@pytest.mark.parametrize("mixture", [False, True], ids=["corpus", "mixture"])
def test_an_exception_at_an_epoch_s_end_leaves_the_state_of_the_last_document(
    corpora: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, mixture: bool
) -> None:
    # The step to the next epoch sets its fields one at a time: the state read between was
    # one the library refused ("in_block: 0 in the share's first block, whose epoch handed out
    # 30").
    a, b = corpora
    source: Any = owt.Mixture({"a": a, "b": b}, {"a": 0.7, "b": 0.3}) if mixture else a

    def make(state: Any = None) -> Any:
        return owt.Loader(source, workers=0, seed=1, epochs=2).iter(state=state)

    _interrupted_then_resumed(make, lambda: monkeypatch.setattr(
        stream_module, "ended", _raising_once(stream_module.ended)))  # fmt: skip


def test_an_exception_while_a_block_is_set_up_leaves_the_state_of_the_last_document(
    corpora: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def make(state: Any = None) -> Any:
        return owt.Loader(corpora[0], workers=0, seed=1, shuffle_buffer=4).iter(state=state)

    _interrupted_then_resumed(make, lambda: monkeypatch.setattr(
        stream_module, "block_permutation", _raising_once(stream_module.block_permutation, 3)))


@pytest.mark.parametrize("kind", ["concat", "bestfit", "mixture"])
def test_a_batch_made_and_not_handed_out_is_not_in_the_state(
    corpora: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # A batch made, then an exception before next() returned it: the state was after it (the
    # batch lost), and the packer went on.
    a, b = corpora
    source: Any = owt.Mixture({"a": a, "b": b}, {"a": 0.5, "b": 0.5}) if kind == "mixture" else a
    packing = {"packing": "bestfit", "window": 8} if kind == "bestfit" else {}

    def make(state: Any = None) -> Any:
        loader = owt.Loader(source, workers=0, seed=1, tokenizer="bytes")
        return loader.batches(64, 2, state=state, **packing)

    def patch() -> None:
        monkeypatch.setattr(Packer, "_closed_by_another",
                            _raising_once(Packer._closed_by_another, 5, after=True))  # fmt: skip

    _interrupted_then_resumed(make, patch)
    patch()
    with make() as it:  # and the packer cannot go on: it says so
        with pytest.raises(Stop):
            for _ in it:
                pass
        with pytest.raises(RuntimeError, match="failed inside an earlier next"):
            next(it)


def test_a_batch_made_ahead_and_not_handed_out_is_not_in_the_state(
    corpora: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    def make(state: Any = None) -> Any:
        loader = owt.Loader(corpora[0], workers=0, seed=1, tokenizer="bytes")
        return owt.ahead(loader.batches(64, 2, state=state))

    def patch() -> None:  # (after the 4th batch was taken and its state noted)
        monkeypatch.setattr(readahead.Ahead, "_hand_out",
                            _raising_once(readahead.Ahead._hand_out, 4, after=True))  # fmt: skip

    _interrupted_then_resumed(make, patch)


def test_a_close_cut_by_an_exception_never_closes_a_file_the_program_opened_since(
    corpora: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The files were closed, then forgotten: cut in between, the next close closed their
    # numbers again, one of them the program's own file by then.
    real_close = os.close
    armed = [True]

    def close_then_stop(fd: int) -> None:
        real_close(fd)
        if armed[0]:
            armed[0] = False
            raise Stop()

    it = owt.Loader(corpora[0], workers=0, seed=1).iter()
    next(it)
    monkeypatch.setattr(raw.os, "close", close_then_stop)
    with pytest.raises(Stop):
        it.close()
    monkeypatch.setattr(raw.os, "close", real_close)
    mine = os.open(tmp_path / "checkpoint", os.O_WRONLY | os.O_CREAT)
    try:
        it.close()
        assert os.write(mine, b"state") == 5
    finally:
        os.close(mine)


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise Stop()

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.waits_on_workers
def test_a_signal_inside_a_pool_s_close_waits_for_its_end(
    corpora: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, sigterm_raises: None
) -> None:
    # A handler's exception right after a worker's wait, before multiprocessing noted it: the
    # worker stayed "running" for ever, and the next close raised multiprocessing's ValueError.
    it = owt.Loader(corpora[0], workers=2, seed=1).iter()
    next(it)
    real_waitpid = os.waitpid
    sent = []

    def waitpid_then_signal(pid: int, options: int) -> tuple[int, int]:
        got = real_waitpid(pid, options)
        if got[0] == pid and not sent:
            sent.append(pid)
            os.kill(os.getpid(), signal.SIGTERM)  # (its handler runs at the next chance)
        return got

    monkeypatch.setattr(os, "waitpid", waitpid_then_signal)
    with pytest.raises(Stop):
        it.close()  # the close ends first; the handler runs after it
    monkeypatch.setattr(os, "waitpid", real_waitpid)
    assert sent
    it.close()
    assert child_pids() == []


def test_the_stats_after_a_failure_count_what_the_error_counts(tmp_path: Path) -> None:
    # A failure while the next block was read (between blocks: the state is the last
    # document's) left the stats there too: the skip the error named was not in them.
    import tarfile

    write_corpus(tmp_path / "c", subsets=2, members=3, docs=5, seed=0)
    path = tmp_path / "c" / "urlsf_subset01.tar"
    with tarfile.open(path) as tar:
        member = tar.getmembers()[1]
    with open(path, "r+b") as f:  # (one member damaged)
        f.seek(member.offset_data + member.size // 2)
        f.write(b"\0" * 64)
    it = owt.Loader(tmp_path / "c", workers=0, shuffle_buffer=4096, seed=2, epochs=3,
                    on_error="skip", max_errors=1).iter()  # fmt: skip
    with pytest.raises(owt.TooManyErrors, match="2 skipped, more than max_errors=1"):
        for _ in it:
            pass
    assert len(it.stats.skipped) == 2
