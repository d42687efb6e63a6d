"""What a red team of environments (session 34) found: stderr's reader gone, umasks, file
names that hold a newline, a counts file another user keeps private, a stdout that cannot
encode a path or is closed."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from openwebtext import cli, errors, files, synth
from openwebtext.cli import standard
from openwebtext.errors import CorruptDocument
from openwebtext.index import Corpus
from openwebtext.index import countsfile as counts_module
from openwebtext.synth import write_corpus

OWT = [sys.executable, "-m", "openwebtext.cli"]


def test_stderr_s_reader_gone_stops_nothing(tmp_path: Path) -> None:
    """``owt stream … 2>&1 >/dev/null | true`` (a log pipe that died, ``|& head``): the
    progress bar's write raised ``BrokenPipeError``, taken for stdout's reader gone: the run
    stopped where it was and exited 0, its state saying 0 documents of 120. The run now goes
    on whole, what it says dropped."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=2, docs=60, seed=0, workers=1).path
    state = tmp_path / "s.json"
    read, write = os.pipe()
    os.close(read)  # the reader gone before the run says anything
    try:
        ran = subprocess.run([*OWT, "stream", str(corpus), "-j", "1", "--state-out", str(state)],
                             stdout=subprocess.DEVNULL, stderr=write, timeout=300)  # fmt: skip
    finally:
        os.close(write)
    assert ran.returncode == 0
    assert json.loads(state.read_text())["counters"]["documents"] == 120


def test_a_broken_pipe_not_stdout_s_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``BrokenPipeError`` of another pipe than stdout's (a server's, a worker's) ended
    ``owt`` quietly with 0, as if stdout's reader had gone. It is an error now."""

    def broken(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli.synth, "run", broken)
    code = cli.main(["synth", str(Path("never-written"))])
    assert code == 1
    assert "owt: error: [Errno 32] Broken pipe" in capsys.readouterr().err


def test_a_name_that_holds_a_newline_is_said_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """cli.md: every error is one line. A document's name was added after the error's
    message was made one line, and the warning of files left out named them raw: a file
    named ``a⏎b.jsonl`` split both. A name's newline is written ``\\n`` (a space would name
    another file); a message's becomes a space. While ``owt`` runs, every record the library
    logs is one line (wherever it goes: here, the test's capture), and so is a warning."""
    error = CorruptDocument("line 2: bad\nvalue", "d/a\nb.jsonl", "a\nb.jsonl", "a\nb.jsonl@15")
    assert str(error) == "d/a\\nb.jsonl[a\\nb.jsonl]: line 2: bad value (document a\\nb.jsonl@15)"
    assert errors.one_line("x\x00y\n", name=True) == "x\\x00y\\n"
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "a\nb.jsonl").write_text('{"text": "one"}\n{"text": \n')
    (folder / "READ\nME.md").write_text("not a corpus file")
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        code = cli.main(["stream", str(folder), "-j", "0", "--on-error", "warn", "-q"])
    err = capsys.readouterr().err
    assert code == 0, err
    said = [record.getMessage() for record in caplog.records]
    assert "left out 1 file that is not a corpus file: READ\\nME.md" in said, said
    assert said and all("\n" not in line for line in said), said
    warned = [line for line in said if "line 2:" in line]
    assert warned and all("(document a\\nb.jsonl@" in line for line in warned), said
    assert not [line for line in err.splitlines() if line.startswith(("b.jsonl", "ME.md"))], err
    with standard.messages():
        assert warnings.formatwarning("two\nlines", UserWarning, "f.py", 1) == (
            "UserWarning: two lines\n")


def test_the_umask_is_read_without_changing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new output's mode was found by setting the umask to 0 and back: a file another
    thread made in that moment got mode 0666 under a umask of 077. It is read from
    ``/proc/self/status`` now, the process's umask never changed."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc/self/status: the umask is set and reset there")
    old = os.umask(0o077)
    try:
        calls: list[int] = []
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or 0)
        assert files.umask() == 0o077
        files.atomic_write(tmp_path / "out.txt", "x")
        assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o600
        assert calls == []
    finally:
        monkeypatch.undo()
        os.umask(old)


def test_a_synthetic_corpus_folder_follows_the_umask(tmp_path: Path) -> None:
    """``owt synth``'s folder was 0755 whatever the umask: under 002 a group sharing the
    corpus could not write its counts beside it; under 077 it was open to all."""
    for mask, mode in ((0o077, 0o700), (0o002, 0o775)):
        old = os.umask(mask)
        try:
            out = synth.write_corpus(tmp_path / f"c{mask:o}", 1, 1, 2, workers=1).path
        finally:
            os.umask(old)
        assert stat.S_IMODE(out.stat().st_mode) == mode


def test_a_counts_file_this_user_may_not_read_is_kept_and_not_said_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another user's counts file beside a shared corpus, private (0600): it was said to be
    "damaged", replaced by this user's, given its private mode, so the two users made it
    unreadable to each other in turn, each counting the corpus again. Now it cannot be read
    (said once), and is left as it is: the counts go to this user's cache."""
    corpus = Corpus.open(write_corpus(tmp_path / "c", 1, 2, 3, seed=0, workers=1).path)
    beside, cached = corpus.counts_paths()
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    beside, cached = corpus.counts_paths()
    beside.write_text("theirs")
    reading = counts_module.read_file

    def read(path: Path, *args: object, **kwargs: object) -> bytes:
        if Path(path) == beside:
            raise PermissionError(13, "Permission denied", str(path))
        return reading(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(counts_module, "read_file", read)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: Path(path) != beside)
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        assert corpus.load_counts() is None
        assert corpus.load_counts() is None
    said = [r.getMessage() for r in caplog.records if "counts file" in r.getMessage()]
    assert len(said) == 1 and "cannot be read" in said[0] and "damaged" not in said[0]
    written = corpus.save_counts(counts_module.Counts((3, 3)))
    assert written == cached and beside.read_text() == "theirs"


def test_where_writes_a_path_stdout_cannot_encode(tmp_path: Path) -> None:
    """``PYTHONIOENCODING=ascii owt synth --where`` of a cache path with an ``é`` exited 2
    ("the command line was refused") with the codec's message. The path's bytes are
    written."""
    cache = tmp_path / "hé"
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "OWT_CACHE_DIR": str(cache)}
    ran = subprocess.run([*OWT, "synth", "--where"], capture_output=True, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0].startswith(os.fsencode(cache))


def test_where_refuses_a_closed_stdout(tmp_path: Path) -> None:
    """``owt synth --where >&-`` exited 0 having printed nothing (stdout given /dev/null):
    what it is for is the line it prints. Refused, as ``owt stream --jsonl`` refuses it."""
    env = {**os.environ, "OWT_CACHE_DIR": str(tmp_path / "cache")}
    ran = subprocess.run([*OWT, "synth", "--where"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=env, timeout=120,
                         preexec_fn=lambda: os.close(1))  # fmt: skip
    assert ran.returncode == 1
    assert b"standard output, which is closed" in ran.stderr


def test_messages_nest_and_restore() -> None:
    """``cli.main`` inside a command (nested ``messages``) added a second handler (each
    warning said twice) and left ``sys.stderr`` wrapped once both were done."""
    before, library = sys.stderr, logging.getLogger("openwebtext")
    with standard.messages():
        outer = sys.stderr
        with standard.messages():
            assert sys.stderr is outer and len(library.filters) == 1
        assert sys.stderr is outer and len(library.filters) == 1
    assert sys.stderr is before and library.filters == []
