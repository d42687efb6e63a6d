"""A signal whose exception something swallowed (session 43; CI's early-signal test hung 60 s).

``owt``'s handler raises ``Interrupted`` wherever the main thread is. When that is inside C
code that calls back into Python and clears what it raised (numpy's random generators,
Cython modules imported on first use, register their types with ``collections.abc`` and
ignore a failure), the raise is lost: an endless ``owt stream`` went on for ever. Each test
here sends the signal to this process from a call the command makes, and swallows the
exception there, as that C code does; or turns it into another error, as numpy's import does.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import openwebtext as owt
from openwebtext import cli, interrupts, plan

#: (the signal, the exit status, the word) for each signal an ``owt`` command takes.
SIGNALS = [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]


@pytest.fixture(autouse=True)
def _signals_at_their_defaults() -> Iterator[None]:
    """The command takes a signal only where it is not ignored (a background job's SIGINT)."""
    before = {s: signal.signal(s, h) for s, h in ((signal.SIGINT, signal.default_int_handler),
                                                  (signal.SIGTERM, signal.SIG_DFL))}  # fmt: skip
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def _signalled_in(
    monkeypatch: pytest.MonkeyPatch, signum: int, then: Callable[[BaseException], None]
) -> list[BaseException]:
    """Make the first unit order the command asks for (``plan.permutation``) send ``signum``
    to this process and hand what the handler raised to ``then``; what it raised, once."""
    real, raised = plan.permutation, []

    def signalled(*args: Any, **kwargs: Any) -> Any:
        if not raised:
            try:
                os.kill(os.getpid(), signum)
                time.sleep(1.0)  # (the handler runs here, at once)
            except BaseException as exc:
                raised.append(exc)
                then(exc)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan, "permutation", signalled)
    return raised


def _swallow(exc: BaseException) -> None:
    """What a Cython module's import does with an error of an ABC registration."""


@pytest.mark.parametrize("workers", ["0", "2"])
@pytest.mark.parametrize(("signum", "code", "word"), SIGNALS)
def test_an_endless_stream_ends_on_a_signal_whose_exception_was_swallowed(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    workers: str, signum: int, code: int, word: str,
) -> None:  # fmt: skip
    # Three epochs stand for an endless one: before the fix all three were read, exit 0.
    raised = _signalled_in(monkeypatch, signum, _swallow)
    assert cli.main(["stream", str(small_corpus), "--epochs", "3", "-j", workers, "-q"]) == code
    assert [type(e) for e in raised] == [interrupts.Interrupted]
    err = capsys.readouterr().err
    assert word in err and "Traceback" not in err


@pytest.mark.parametrize(
    "kind",
    [
        ["--jsonl"],
        ["--pack", "concat"],
        ["--pack", "bestfit"],
        ["--mix", "a={corpus}/urlsf_subset00.tar:1", "--mix", "b={corpus}/urlsf_subset01.tar:2"],
    ],
)
def test_every_kind_of_stream_ends_on_it(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    kind: list[str],
) -> None:  # fmt: skip
    _signalled_in(monkeypatch, signal.SIGTERM, _swallow)
    flags = [f.format(corpus=small_corpus) for f in kind]
    if "--pack" in flags:
        flags += ["--tokenizer", "bytes", "--seq-len", "64", "--batch-size", "2"]
    paths = [] if "--mix" in flags else [str(small_corpus)]
    assert cli.main(["stream", *paths, *flags, "--epochs", "3", "-j", "2", "-q"]) == 143
    assert "terminated" in capsys.readouterr().err


def test_the_stream_ends_within_the_next_unit(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its state says how far: the documents of at most one unit after the signal."""
    _signalled_in(monkeypatch, signal.SIGTERM, _swallow)
    out = tmp_path / "state.json"
    assert cli.main(["stream", str(small_corpus), "--epochs", "3", "-j", "0", "-q",
                     "--state-out", str(out)]) == 143  # fmt: skip
    monkeypatch.undo()
    saved = json.loads(out.read_text())
    rest = list(owt.Loader(small_corpus, workers=0, epochs=3).iter(state=saved))
    assert len(rest) >= 3 * 120 - 20  # nothing read past the unit in hand (20 documents)


@pytest.mark.parametrize(("signum", "code", "word"), SIGNALS)
def test_a_signal_something_turned_into_another_error_ends_as_the_signal(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    signum: int, code: int, word: str,
) -> None:  # fmt: skip
    """numpy's import says an interrupt inside its extension module as an ``ImportError``:
    that was a traceback."""

    def as_numpy_does(exc: BaseException) -> None:
        raise ImportError("numpy: the C extensions failed to import") from exc

    _signalled_in(monkeypatch, signum, as_numpy_does)
    assert cli.main(["stream", str(small_corpus), "-j", "0", "-q"]) == code
    err = capsys.readouterr().err
    assert word in err and "Traceback" not in err


def test_a_command_that_finished_after_a_swallowed_signal_ends_as_it(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run too short to reach another unit: it said 0, as if no signal had come."""
    _signalled_in(monkeypatch, signal.SIGTERM, _swallow)
    assert cli.main(["stream", str(small_corpus), "-j", "0", "-q", "--take", "1"]) == 143
    assert "terminated" in capsys.readouterr().err


def test_outside_a_command_the_library_takes_no_signal(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host's handler is the host's: a raise it lost is not raised again by the library."""
    raised = _signalled_in(monkeypatch, signal.SIGINT, _swallow)
    assert len(list(owt.Loader(small_corpus, workers=0).iter())) == 120
    assert [type(e) for e in raised] == [KeyboardInterrupt]
    assert interrupts.owed() is None
