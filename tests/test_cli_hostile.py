"""What a hostile (or unlucky) user of ``owt`` hits (issue 10, the command-line part).

Signals: every command ends on SIGINT and SIGTERM alike (exit 130 / 143), leaving no
process, no temporary file or folder, and a state that describes exactly what reached
stdout. Files: ``--state-out`` never replaces a device, a FIFO or a link. Bad options and
bad states: a message, never a traceback. Progress: members done of the total.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from openwebtext import Loader, Options, WorkerError, files
from openwebtext import cli as owt_cli
from openwebtext.cli import summary as cli_summary
from openwebtext.engine import parent as owt_workers
from openwebtext.stream.schema import STATE_FORMAT
from support import (
    cut_member,
    group_pids,
    outer_tar,
    run_owt,
    sample_docs,
    wait_until,
    xz_member,
)

OWT = [sys.executable, "-m", "openwebtext.cli"]


def _default_signals() -> None:
    # The child must see SIGINT and SIGTERM as a terminal would deliver them, whatever
    # disposition the test runner was started with.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def sigint_default() -> Iterator[None]:
    """SIGINT handled in this process while the block runs, so that the children it starts
    begin with SIGINT at its default (a test run started in the background has it ignored,
    and an ignored signal stays ignored in a child); for helpers that take no
    ``preexec_fn``."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def owt(*args: str, **run: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*OWT, *args], capture_output=True, timeout=120, **run)


def start(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """A child in its own session (its group is ours to check), default signal handling."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=_default_signals, **popen)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill every process of ``proc``'s group, wait for it and close its pipes (one left open
    is reported by the garbage collector in whichever test runs then: CI's stop 72)."""
    for pid in group_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


# -- 1. Ctrl-C / SIGTERM and resume through --jsonl: nothing lost, nothing repeated --------


def read_up_to(fd: int, limit: int) -> bytes:
    """Read from ``fd`` until ``limit`` bytes or EOF."""
    got = b""
    while len(got) < limit:
        part = os.read(fd, limit - len(got))
        if not part:
            break
        got += part
    return got


@pytest.mark.slow  # (~12 s: 40 cycles at random points; a Ctrl-C and resume: test_cli_stream.py)
def test_interrupted_and_resumed_jsonl_equals_one_run(small_corpus: Path, tmp_path: Path) -> None:
    """Many interrupt (SIGINT or SIGTERM) + resume cycles: the pieces are the whole run.

    The reader takes a random number of bytes, then signals owt, then drains the pipe: the
    signal lands at random points (blocked in a write, between documents, while reading).
    Every piece must end with a whole line, and the next run must start right after it.
    """
    base = ["stream", str(small_corpus), "--jsonl", "-j", "2", "--epochs", "3", "--seed", "5"]
    base += ["--shuffle-buffer", "30"]
    full = owt(*base).stdout
    assert full.count(b"\n") == 360
    state = tmp_path / "state.json"
    rng = random.Random(10)
    pieces: list[bytes] = []
    resume: list[str] = []
    interrupted = 0
    log: list[tuple[int, int, int, int | None]] = []  # cycle, exit code, lines, saved count
    for cycle in range(40):
        proc = start([*OWT, *base, "--state-out", str(state), *resume], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            first = read_up_to(proc.stdout.fileno(), rng.randrange(1, 160_000))
            if cycle < 10:
                time.sleep(rng.choice([0, 0, 0.001, 0.01]))
                proc.send_signal(signal.SIGINT if cycle % 2 else signal.SIGTERM)
            rest = proc.stdout.read()
            code = proc.wait(timeout=60)
        finally:
            kill_group(proc)
            proc.stdout.close()
        piece = first + rest
        saved = None
        if state.exists():
            saved = json.loads(state.read_text())["counters"].get("documents", 0)
        log.append((cycle, code, piece.count(b"\n"), saved))
        assert piece == b"" or piece.endswith(b"\n"), f"cycle {cycle}: a line cut short"
        pieces.append(piece)
        assert code in (0, 130, 143, -signal.SIGINT, -signal.SIGTERM), (code, log)
        if code == 0 or b"".join(pieces) == full:
            break  # done (a signal that lands as owt ends may still end it: nothing is lost)
        assert code in (130, 143), (code, log)
        interrupted += 1
        resume = ["--resume", str(state)]
    assert interrupted >= 5
    assert b"".join(pieces) == full, log  # no document lost, none repeated, same order


# -- 3. SIGTERM and SIGINT end every command and leave nothing -----------------------------


#: ``owt stream`` with no path while the built-in corpus is generated (shape made bigger
#: than in the other tests, so that it takes a few seconds).
DEFAULT_CORPUS_OWT = """
import sys
from openwebtext import cli
from openwebtext.synth import builtin
builtin._DEFAULT_SHAPE = (1, 16, 400, 0)
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
@pytest.mark.parametrize("command", ["synth", "default-corpus"])
def test_signal_while_generating_a_corpus_leaves_nothing(
    command: str, signum: int, tmp_path: Path
) -> None:
    """owt synth, and a first owt stream making the default corpus: exit 128 + signal, no
    process left (stdout closes, so a pipeline ends), no .partial folder."""
    env = {**os.environ, "OWT_CACHE_DIR": str(tmp_path / "cache")}
    if command == "synth":
        argv = [*OWT, "synth", str(tmp_path / "out"), "--subsets", "1", "--members", "16"]
        argv += ["--docs", "400", "-j", "2", "-q"]
    else:
        argv = [sys.executable, "-c", DEFAULT_CORPUS_OWT, "stream", "-q", "-j", "2"]
    proc = start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert wait_until(lambda: len(group_pids(proc.pid)) >= 3, 60), "no workers started"
        time.sleep(0.3)
        proc.send_signal(signum)
        # Returns only once every process holding stdout is gone.
        _, err = proc.communicate(timeout=30)
    finally:
        kill_group(proc)
    assert proc.returncode == 128 + signum, err.decode()
    assert "Traceback" not in err.decode()
    assert group_pids(proc.pid) == []
    left = [p.name for p in tmp_path.rglob("*") if not p.name.endswith(".lock")]
    assert left == [] or left == ["cache"], left


def test_sigterm_ends_owt_stream_writes_the_state_and_leaves_nothing(
    small_corpus: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    proc = start(
        [*OWT, "stream", str(small_corpus), "-j", "2", "--jsonl", "--shuffle-buffer", "0",
         "--state-out", str(state)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert wait_until(lambda: len(group_pids(proc.pid)) >= 3, 60), "owt did not start"
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        kill_group(proc)
    assert proc.returncode == 143
    assert err.decode().rstrip().endswith("terminated")
    assert group_pids(proc.pid) == []
    lines = out.splitlines(keepends=True)
    assert all(line.endswith(b"\n") for line in lines)
    assert json.loads(state.read_text())["counters"].get("documents", 0) == len(lines)
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file


def test_exit_interrupted_is_defined_once() -> None:
    from openwebtext import bench, interrupts

    assert owt_cli.EXIT_INTERRUPTED is interrupts.EXIT_INTERRUPTED == 130
    assert bench.EXIT_INTERRUPTED is interrupts.EXIT_INTERRUPTED
    for path in Path(owt_cli.__file__).parent.rglob("*.py"):
        if path.name != "interrupts.py":
            assert "EXIT_INTERRUPTED = " not in path.read_text(), path


# -- 2. --state-out never destroys what is at its path ---------------------------------


def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "state.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-device":
        path.symlink_to("/dev/null")
    elif kind == "link-to-fifo":
        os.mkfifo(tmp_path / "fifo")
        path.symlink_to(tmp_path / "fifo")
    elif kind == "folder":
        path.mkdir()
    elif kind == "missing-folder":
        path = tmp_path / "nowhere" / "state.json"
    return path


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("fifo", "not a regular file"),
        ("link-to-device", "not a regular file"),
        ("link-to-fifo", "not a regular file"),
        ("folder", "is a folder"),
        ("missing-folder", "does not exist"),
    ],
)
def test_state_out_refuses_what_it_must_not_replace(
    kind: str, message: str, small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused at start-up, with the path in the message; nothing read, nothing replaced."""
    path = _special(tmp_path, kind)
    before = (path.is_symlink(), os.lstat(path).st_mode) if kind != "missing-folder" else None
    code = owt_cli.main(["stream", str(small_corpus), "-q", "--state-out", str(path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"owt: error: {path}") and message in err, err
    assert "documents" not in err  # refused before reading
    if before is not None:
        assert (path.is_symlink(), os.lstat(path).st_mode) == before


def test_state_out_onto_a_pipe_through_proc_is_refused_as_one(
    small_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--state-out /dev/stdout`` with standard output a pipe: the path resolves to no file
    (``/proc/PID/fd/pipe:[N]``), and the refusal said "cannot write a file in the folder
    /proc/PID/fd" (red team, session 28). It is refused as the pipe it is."""
    read, write = os.pipe()
    try:
        path = f"/proc/self/fd/{write}"
        code = owt_cli.main(["stream", str(small_corpus), "-q", "--state-out", path])
    finally:
        os.close(read)
        os.close(write)
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"owt: error: {path}: is not a regular file"), err


def test_state_out_where_the_filesystem_refuses_a_file_is_refused_at_start_up(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A folder whose modes allow writing, whose filesystem refuses a file (``/sys``, for
    root): the state was refused after the whole run, as an OSError naming a temporary file
    and not the option's path. Now at start-up, naming it (a file made there and removed)."""

    def refused(**where: Any) -> Any:
        raise PermissionError(13, "Permission denied", f"{where['dir']}/.state.json.x.tmp")

    monkeypatch.setattr(files, "tempfile", SimpleNamespace(mkstemp=refused))
    path = tmp_path / "state.json"
    code = owt_cli.main(["stream", str(small_corpus), "-q", "--state-out", str(path)])
    err = capsys.readouterr().err
    assert code == 1 and "documents" not in err, err  # refused before reading
    assert err.startswith(f"owt: error: {path}: cannot write a file in the folder {tmp_path}: "
                          "Permission denied"), err  # fmt: skip


def test_state_out_follows_a_link_and_uses_the_umask(small_corpus: Path, tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    link = tmp_path / "state.json"
    link.symlink_to(target)
    old = os.umask(0o022)
    try:
        assert owt_cli.main(["stream", str(small_corpus), "-q", "--state-out", str(link)]) == 0
    finally:
        os.umask(old)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["counters"].get("documents", 0) == 120
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real.json", "state.json"]


def _corrupt_corpus(tmp_path: Path) -> Path:
    """A good member, then a member cut in half."""
    good = xz_member(sample_docs("a", 3))
    return outer_tar(
        tmp_path / "bad.tar", [("a_data.xz", good), ("c_data.xz", cut_member(sample_docs("c", 5)))]
    )


def test_a_failed_state_write_does_not_hide_the_error_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def disk_full(path: object, data: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_summary, "atomic_write", disk_full)
    bad = _corrupt_corpus(tmp_path)
    code = owt_cli.main(["stream", str(bad), "-q", "--state-out", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot write the state" in err and "No space left" in err
    assert f"owt: error: {bad}[c_data.xz]" in err  # the error that ended the run


# -- 4. messages, not tracebacks ----------------------------------------------------------


GOOD_POSITION = {"epoch": 0, "block": 0, "in_block": 0}


@pytest.mark.parametrize(
    "content",
    [
        "[1, 2]",
        '"hello"',
        "42",
        "null",
        "{",
        b"\xff\xfe".decode("latin-1"),
        json.dumps({"format": STATE_FORMAT, "position": "x"}),
        json.dumps({"format": STATE_FORMAT, "position": {"epoch": "0", "block": 0, "in_block": 0}}),
        json.dumps({"format": STATE_FORMAT, "position": GOOD_POSITION, "config": []}),
        json.dumps({"format": STATE_FORMAT, "position": GOOD_POSITION, "counters": "x"}),
        json.dumps(
            {"format": STATE_FORMAT, "position": GOOD_POSITION, "counters": {"documents": "many"}}
        ),
    ],
)
def test_bad_state_files_are_messages(
    content: str, small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "state.json"
    path.write_text(content, encoding="latin-1")
    code = owt_cli.main(["stream", str(small_corpus), "-q", "--resume", str(path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"owt: error: {path}: "), err
    assert "documents, " not in err  # no summary: nothing was read


def _saved_state(small_corpus: Path, tmp_path: Path, *extra: str) -> dict[str, Any]:
    path = tmp_path / "saved.json"
    argv = ["stream", str(small_corpus), "-q", "--state-out", str(path), *extra]
    assert owt_cli.main(argv) == 0
    state: dict[str, Any] = json.loads(path.read_text())
    return state


@pytest.mark.parametrize(
    ("position", "message"),
    [
        ({"block": 999, "in_block": 0}, "position: block=999, in_block=0 lies past the end"),
        ({"block": 6, "in_block": 1}, "block=6, in_block=1 lies past the end of the corpus's"),
        ({"in_block": 10**6}, "in_block=1000000 is more than the counters.epoch_documents"),
        ({"epoch": 5, "block": 0}, "nothing left to read"),
    ],
)
def test_a_state_past_the_end_is_refused(
    position: dict[str, int],
    message: str,
    small_corpus: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = _saved_state(small_corpus, tmp_path, "--take", "5")
    state["position"].update(position)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(state))
    code = owt_cli.main(["stream", str(small_corpus), "-q", "--resume", str(path)])
    err = capsys.readouterr().err
    assert code == 1 and message in err, err


def test_a_finished_run_resumed_says_so(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _saved_state(small_corpus, tmp_path)
    capsys.readouterr()
    code = owt_cli.main(
        ["stream", str(small_corpus), "-q", "--resume", str(tmp_path / "saved.json")]
    )
    err = capsys.readouterr().err
    assert code == 1 and "nothing left to read" in err and "--epochs 2" in err


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["stream", "--timeout", "inf"], "timeout"),
        (["stream", "--timeout", "1e308"], "timeout"),
        (["stream", "--timeout", "nan"], "timeout"),
        (["stream", "--timeout", "0"], "timeout"),
        (["stream", "--split", "val", "--val-seed", "-1"], "val_seed"),
        (["stream", "--split", "val", "--val-seed", str(2**64)], "val_seed"),
        (["index", "--val-seed", "-1"], "val_seed"),
        (["index", "--val-seed", str(2**64)], "val_seed"),
        (["tokenize", "--out", "x", "--val-seed", "-1"], "val_seed"),
        (["tokenize", "--out", "x", "--val-seed", str(2**64)], "val_seed"),
        (["stream", "--val-fraction", "2"], "val_fraction"),
        (["stream", "--val-fraction", "-1"], "val_fraction"),
        (["stream", "--val-fraction", "nan"], "val_fraction"),
        (["index", "--val-fraction", "2"], "val_fraction"),
        (["index", "--val-fraction", "nan"], "val_fraction"),
        (["tokenize", "--out", "x", "--val-fraction", "-1"], "val_fraction"),
        (["tokenize", "--out", "x", "--val-fraction", "nan"], "val_fraction"),
        (["stream", "-j", "-1"], "workers"),
        (["stream", "--take", "-3"], "take"),
        (["stream", "--world-size", "0"], "world_size"),
        (["stream", "--epochs", "-1"], "epochs"),
    ],
)
def test_bad_options_are_refused_up_front(
    argv: list[str],
    option: str,
    small_corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A usage error (exit 2) naming the option, before anything is read or written."""
    monkeypatch.chdir(tmp_path)  # where --out x would go
    with pytest.raises(SystemExit) as exit_:
        owt_cli.main([argv[0], str(small_corpus), *argv[1:]])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert option.replace("_", "-") in err or option in err, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "options",
    [
        {"val_seed": -1},
        {"val_seed": 2**64},
        {"timeout": math.inf},
        {"timeout": 1e308},
        {"timeout": math.nan},
        {"val_fraction": math.nan},
        {"val_fraction": 2},
        {"val_fraction": True},
    ],
)
def test_options_refuse_values_that_fail_later(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        Options(**options)


def test_many_workers_are_capped_at_the_members(
    small_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-j 1000 on 6 members: 6 workers, not 1000 x 3 slots of shared memory."""
    ran = run_owt(capsys, "stream", str(small_corpus), "-j", "1000", "-q")
    assert ran.returncode == 0, ran.stderr
    assert "120 documents" in ran.stderr


def test_shared_memory_refused_says_what_to_do(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_memory(*args: object) -> None:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(owt_workers.mmap, "mmap", no_memory)
    # The slots counted as reserved: 2 workers' 3 each and the 16 the consumer holds (the
    # message said "for 2 workers (3 slots …)" of 0.3 GiB, 22 slots).
    with pytest.raises(WorkerError, match=r"0\.3 GiB of shared memory: 22 slots of 16 MiB \(2 "
                       r"workers with 3 each, and 16 the consumer holds, per lane\): .* use "
                       r"fewer workers, "
                       r"or none \(workers=0, -j 0\)"):  # fmt: skip
        list(Loader(str(small_corpus), workers=2))


def _close(fd: int) -> Callable[[], None]:
    def preexec() -> None:
        os.close(fd)

    return preexec


def test_jsonl_with_stdout_closed_is_a_message(small_corpus: Path) -> None:
    proc = owt("stream", str(small_corpus), "--jsonl", preexec_fn=_close(1))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert err == ("owt: error: standard output is closed (or open for reading only): nowhere "
                   "to write --jsonl\n")


@pytest.mark.parametrize("how", [["--jsonl"], ["-q"], []], ids=["jsonl", "quiet", "bar"])
def test_stderr_closed_still_reads_everything(
    how: list[str], small_corpus: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    proc = owt("stream", str(small_corpus), "--state-out", str(state), *how, preexec_fn=_close(2))
    assert proc.returncode == 0
    if how == ["--jsonl"]:  # only documents on stdout (no summary line strayed there)
        assert [json.loads(line)["name"] for line in proc.stdout.splitlines()]
        assert len(proc.stdout.splitlines()) == 120
    else:
        assert proc.stdout == b""
    assert json.loads(state.read_text())["counters"].get("documents", 0) == 120


def test_no_summary_after_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _corrupt_corpus(tmp_path)
    assert owt_cli.main(["stream", str(bad), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("owt: error: ") and "documents, " not in err, err


# -- 5. progress: members done of the total, time left, docs/s, MB/s ------------------------


def test_progress_shows_members_of_the_total(
    small_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run_owt(capsys, "stream", str(small_corpus), "-j", "1")
    assert ran.returncode == 0, ran.stderr
    bar = ran.stderr.replace("\r", "\n").splitlines()
    final = [line for line in bar if "6/6" in line]
    assert final, bar
    assert "100%" in final[-1] and "member" in final[-1]
    assert "docs/s" in final[-1] and "MB/s" in final[-1]
    assert "<00:00" in final[-1]  # the time left


def test_progress_total_of_a_resumed_run(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    args = ["stream", str(small_corpus), "-j", "1", "--no-shuffle"]
    assert run_owt(capsys, *args, "-q", "--take", "50", "--state-out", str(state)).returncode == 0
    block = json.loads(state.read_text())["position"]["block"]
    bar = run_owt(capsys, *args, "--resume", str(state), "--epochs", "2").stderr
    assert f"{12 - block}/{12 - block}" in bar, bar


@pytest.mark.parametrize("command", ["index", "tokenize"])
def test_sigterm_ends_index_and_tokenize_and_leaves_nothing(
    command: str, tmp_path: Path, small_corpus: Path
) -> None:
    """The other commands that start workers: exit 143, no process, no temporary file."""
    corpus = tmp_path / "corpus"
    # Without the counts other tests may have cached beside the shared corpus: owt index
    # would find nothing to count and start no worker.
    shutil.copytree(small_corpus, corpus, ignore=shutil.ignore_patterns(".owt-counts-*"))
    out = tmp_path / "out"
    argv = [*OWT, command, str(corpus), "-j", "2", "-q"]
    if command == "tokenize":
        argv += ["--out", str(out), "--tokenizer", "bytes"]
    # A worker stuck in its first member keeps the command busy until the signal.
    hang = (
        "import time; from openwebtext.engine.read import Reader; "
        "Reader.read = lambda *a: time.sleep(60)"
    )
    script = f"import sys; {hang}; from openwebtext import cli; sys.exit(cli.main(sys.argv[1:]))"
    proc = start(
        [sys.executable, "-c", script, *argv[3:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert wait_until(lambda: len(group_pids(proc.pid)) >= 3, 60), "no workers started"
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        kill_group(proc)
    assert proc.returncode == 143, err.decode()
    assert "Traceback" not in err.decode()
    assert group_pids(proc.pid) == []
    assert sorted(p.name for p in corpus.iterdir()) == sorted(
        p.name for p in small_corpus.iterdir() if not p.name.startswith(".owt-counts-")
    )
    if command == "index":
        assert not out.exists()
    # (owt tokenize keeps its resumable .part files by design: tests/test_prepare.py.)
