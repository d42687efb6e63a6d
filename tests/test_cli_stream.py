"""``owt stream``'s closing summary counts what reached its sink: after Ctrl-C or SIGTERM,
the lines written to stdout, not the documents handed out but never written."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext.cli import jsonl, main
from openwebtext.loader import Document
from test_cli_hostile import OWT, kill_group, read_up_to, start, wait_until


def _summary_documents(err: str) -> int:
    (count,) = re.findall(r"^(\d+) documents, ", err, re.MULTILINE)
    return int(count)


@pytest.mark.parametrize("at", [20, 50, 95])
def test_the_summary_after_an_interrupt_counts_the_lines_written(
    at: int,
    small_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C lands while lines wait in the chunk being filled: they are dropped (the state
    ends before them), and the summary says so."""
    monkeypatch.setattr(jsonl, "_CHUNK", 1 << 15)  # a few lines a chunk
    made = [0]
    line_of = jsonl._json_line

    def interrupted_at(doc: Document) -> bytes:
        made[0] += 1
        if made[0] == at:
            raise KeyboardInterrupt
        return line_of(doc)

    monkeypatch.setattr(jsonl, "_json_line", interrupted_at)
    state = tmp_path / "state.json"
    argv = ["stream", str(small_corpus), "-j", "1", "--jsonl", "--state-out", str(state)]
    assert main(argv) == 130
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert 0 < len(lines) < at - 1  # some lines were still in the unwritten chunk
    assert json.loads(state.read_text())["counters"].get("documents", 0) == len(lines)
    assert _summary_documents(err) == len(lines), err
    text_mb = sum(len(json.loads(line)["text"].encode()) for line in lines) / 1e6
    assert f"{text_mb:.1f} MB of text" in err


def test_a_mixture_s_summary_after_an_interrupt_counts_the_lines_written_per_part(
    small_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same of ``--mix``: its documents line and each part's count the lines written (they
    counted the documents handed out, those dropped with the unwritten chunk too)."""
    monkeypatch.setattr(jsonl, "_CHUNK", 1 << 15)
    made = [0]
    line_of = jsonl._json_line

    def interrupted_at(doc: Document) -> bytes:
        made[0] += 1
        if made[0] == 50:
            raise KeyboardInterrupt
        return line_of(doc)

    monkeypatch.setattr(jsonl, "_json_line", interrupted_at)
    mix = ["--mix", f"a={small_corpus}/urlsf_subset00.tar:0.5",
           "--mix", f"b={small_corpus}/urlsf_subset01.tar:0.5"]  # fmt: skip
    assert main(["stream", *mix, "-j", "1", "--jsonl"]) == 130
    out, err = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines()]
    assert 0 < len(lines) < 49  # some lines were still in the unwritten chunk
    assert _summary_documents(err) == len(lines), err
    for name in ("a", "b"):
        said = re.search(rf"^  {name}: (\d+) documents?, ", err, re.MULTILINE)
        assert said and int(said[1]) == sum(line["source"] == name for line in lines), err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_to_a_slow_reader_s_stream_sums_up_its_lines(
    signum: int, small_corpus: Path, tmp_path: Path
) -> None:
    """The same through a pipe read slowly, ended by a real signal."""
    argv = [*OWT, "stream", str(small_corpus), "-j", "2", "--jsonl", "--epochs", "0"]
    proc = start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got: list[Any] = []
    try:
        assert proc.stdout is not None
        got.append(read_up_to(proc.stdout.fileno(), 200_000))  # unbuffered: communicate reads on
        assert wait_until(lambda: proc.poll() is None, 1)
        proc.send_signal(signum)
        time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 128 + signum, err.decode()
    lines = (got[0] + out).count(b"\n")
    assert _summary_documents(err.decode()) == lines, err.decode()


def test_the_summary_counts_the_corpus_s_open_and_the_servers_retry_after(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A remote walk held back by 429 + Retry-After took 292 s where the summary said 9 s."""
    from openwebtext.cli import summary as command
    from openwebtext.stream import Stats

    command.summary(Stats(documents=10), Stats(), 2.0, (290.0, 283.5))
    err = capsys.readouterr().err
    assert "opening the corpus took 290.00 s" in err
    assert "(283.50 s of it waiting for the servers' Retry-After)" in err
    command.summary(Stats(documents=10), Stats(), 2.0, (0.1, 0.0))
    assert "opening" not in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["corpus", "mix", "pack"])
def test_a_ctrl_c_while_the_stream_opens_writes_the_state_resumed_from(
    kind: str,
    small_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Ctrl-C while the corpus and its stream open (its counts, the state checked), before
    any document is read, wrote no ``--state-out`` (a red team of ``owt stream``): the state
    resumed from is written as it was; a fresh run has none yet, and says so."""
    from openwebtext.cli import stream

    flags = {
        "corpus": [str(small_corpus)],
        "mix": ["--mix", f"a={small_corpus}/urlsf_subset00.tar:0.5",
                "--mix", f"b={small_corpus}/urlsf_subset01.tar:0.5"],
        "pack": [str(small_corpus), "--pack", "concat", "--tokenizer", "bytes"],
    }[kind]
    first, then = tmp_path / "first.json", tmp_path / "then.json"
    assert main(["stream", *flags, "-j", "0", "-q", "--take", "5", "--state-out", str(first)]) == 0

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(stream, "_stream_options", interrupted)
    capsys.readouterr()
    argv = ["stream", *flags, "-j", "0", "-q", "--state-out", str(then)]
    assert main([*argv, "--resume", str(first)]) == 130
    assert json.loads(then.read_text()) == json.loads(first.read_text())
    then.unlink()
    assert main(argv) == 130
    assert not then.exists()
    assert "interrupted before the stream began (nothing read): no state written" in (
        capsys.readouterr().err
    )
