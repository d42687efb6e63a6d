"""Red-team defects of ``owt stream``: ``--even off`` taken as the default ``drop``; a
``--state-out`` (or the ``--jsonl`` output) that is a corpus file of the run, overwritten; a
``--resume`` file read twice (a pipe's state refused, a FIFO's hanging) and without bound
(``/dev/zero``); the library's keywords (``epochs=None``) in a command's advice; a full disk
said as a bare errno, naming no output."""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from openwebtext.cli import summary
from support import run_owt

OWT = [sys.executable, "-m", "openwebtext.cli"]


@pytest.fixture
def corpus(small_corpus: Path, tmp_path: Path) -> Path:
    """A copy of the small corpus (120 documents in 6 members), free to be written beside."""
    return Path(shutil.copytree(small_corpus, tmp_path / "corpus"))


def _names(out: str) -> list[str]:
    return [json.loads(line)["name"] for line in out.splitlines()]


# -- --even off ---------------------------------------------------------------------------


def test_even_off_reads_every_document_across_the_ranks(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--even off`` is ``even=None``: 7 ranks of 120 documents hold all 120 (under ``drop``,
    119), and no rank says it left documents out."""
    names = []
    for rank in range(7):
        ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "--jsonl", "-q",
                      "--world-size", "7", "--rank", str(rank), "--even", "off")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "left out" not in ran.stderr, ran.stderr
        names += _names(ran.stdout)
    assert len(names) == len(set(names)) == 120


def test_even_off_is_the_rule_a_state_and_a_mixture_s_state_record(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The state of an ``--even off`` run says ``even: null``, a mixture's parts' too (the
    same flags make both)."""
    state = tmp_path / "s.json"
    flags = ("-j", "0", "-q", "--world-size", "2", "--even", "off", "--take", "3")
    ran = run_owt(capsys, "stream", str(corpus), *flags, "--state-out", str(state))
    assert ran.returncode == 0, ran.stderr
    assert json.loads(state.read_text())["config"]["even"] is None
    mix = ["--mix", f"a={corpus}/urlsf_subset00.tar:1", "--mix", f"b={corpus}/urlsf_subset01.tar:1"]
    ran = run_owt(capsys, "stream", *mix, *flags, "--state-out", str(state))
    assert ran.returncode == 0, ran.stderr
    parts = json.loads(state.read_text())["parts"]
    assert [part["config"]["even"] for part in parts.values()] == [None, None]


# -- an output that is an input -----------------------------------------------------------


@pytest.mark.parametrize("given", ["file", "folder", "mixture", "pack"])
def test_a_state_out_naming_a_corpus_file_is_refused_before_reading(
    given: str, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--state-out`` naming a file the run reads (given itself, or in a folder given, or a
    mixture's part) is refused (exit 2), and the file left as it was."""
    tar = corpus / "urlsf_subset00.tar"
    before = tar.read_bytes()
    source = {
        "file": [str(tar)],
        "folder": [str(corpus)],
        "mixture": ["--mix", f"a={tar}:1", "--mix", f"b={corpus}/urlsf_subset01.tar:1"],
        "pack": [str(corpus), "--pack", "concat", "--tokenizer", "bytes"],
    }[given]
    ran = run_owt(capsys, "stream", *source, "-j", "0", "-q", "--take", "2",
                  "--state-out", str(tar))  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert f"{tar}: --state-out names a file this run reads" in ran.stderr
    assert tar.read_bytes() == before


def test_jsonl_onto_a_corpus_file_is_refused(
    corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Standard output opened onto a corpus file of the run (``>> corpus/x.tar``): refused
    (exit 2, as cli.md says: it was 1), nothing written into it."""
    tar = corpus / "urlsf_subset00.tar"
    before = tar.read_bytes()
    with open(tar, "a") as out:
        monkeypatch.setattr(sys, "stdout", out)
        ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--jsonl", "--take", "2")
    assert ran.returncode == 2
    assert "standard output is a file this run reads" in ran.stderr
    assert tar.read_bytes() == before


@pytest.mark.parametrize("on_error", ["raise", "skip"])
@pytest.mark.parametrize("mix", [False, True])
def test_jsonl_into_a_new_file_of_the_corpus_folder_is_refused(
    corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    on_error: str, mix: bool,
) -> None:  # fmt: skip
    """``> corpus/out.jsonl``: the shell makes the file, empty, in the corpus's folder, where the
    run finds it (red team, session 28: "out.jsonl: empty file", exit 1; under ``skip`` it was
    left out, and the documents written into the corpus's folder)."""
    new = corpus / "out.jsonl"
    source = ["--mix", f"a={corpus}:1"] if mix else [str(corpus)]
    with open(new, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        ran = run_owt(capsys, "stream", *source, "-j", "0", "-q", "--jsonl", "--take", "2",
                      "--on-error", on_error)  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "standard output is a file this run reads" in ran.stderr
    assert new.stat().st_size == 0


# -- --resume: read once, and at most a bound ---------------------------------------------


def _saved(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    state = tmp_path / "s.json"
    ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--take", "5",
                  "--state-out", str(state))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    return state.read_bytes()


def test_a_state_through_standard_input_resumes(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume /dev/stdin`` (a pipe): read once, resumed (it was read twice: the second
    read found the pipe empty, "not a JSON state file")."""
    ran = subprocess.run([*OWT, "stream", str(corpus), "-j", "0", "-q", "--resume", "/dev/stdin"],
                         input=_saved(corpus, tmp_path, capsys), capture_output=True,
                         timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.decode().startswith("115 documents, ")


def test_a_state_through_a_fifo_fed_once_resumes(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named FIFO its writer fills once: read once (a second open waited for a writer that
    never came)."""
    saved = _saved(corpus, tmp_path, capsys)
    fifo = tmp_path / "state.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as f:
            f.write(saved)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    ran = subprocess.run([*OWT, "stream", str(corpus), "-j", "0", "-q", "--resume", str(fifo)],
                         capture_output=True, timeout=60, check=False)  # fmt: skip
    writer.join(5)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.decode().startswith("115 documents, ")


def _limited() -> None:  # (the child's address space: /dev/zero read whole would exhaust it)
    resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))


def test_a_device_is_not_a_state(corpus: Path) -> None:
    """``--resume /dev/zero`` was read without end (killed, or a MemoryError traceback): now
    refused at once in one line; a folder too."""
    ran = subprocess.run([*OWT, "stream", str(corpus), "-j", "0", "-q", "--resume", "/dev/zero"],
                         capture_output=True, timeout=120, check=False,
                         preexec_fn=_limited)  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.decode() == "owt: error: /dev/zero: is a device, not a state file\n"
    ran = subprocess.run([*OWT, "stream", str(corpus), "-j", "0", "-q", "--resume", str(corpus)],
                         capture_output=True, timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.decode().startswith(f"owt: error: {corpus}: cannot read the state: Is a ")


def test_a_file_too_large_to_be_a_state_is_refused(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file past ``MOST_STATE_BYTES`` is not read whole: "too large to be a state"."""
    state = tmp_path / "s.json"
    state.write_bytes(_saved(corpus, tmp_path, capsys))
    monkeypatch.setattr(summary, "MOST_STATE_BYTES", 100)
    ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--resume", str(state))
    assert ran.returncode == 1
    assert ran.stderr == f"owt: error: {state}: too large to be a state (more than 100 bytes)\n"


# -- advice in flags ----------------------------------------------------------------------


def test_an_endless_run_s_state_is_resumed_as_owt_spells_it(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state of epoch 1 (an ``--epochs 0`` run) resumed with ``--epochs 1`` (without, it goes
    on without end, as its run did): the advice is ``--epochs 2``, never the library's
    ``epochs=None`` (which the parser refuses)."""
    state = tmp_path / "s.json"
    ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--epochs", "0",
                  "--take", "150", "--state-out", str(state))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--resume", str(state),
                  "--epochs", "1")  # fmt: skip
    assert ran.returncode == 1
    assert "give --epochs 2 to read epoch 1" in ran.stderr, ran.stderr
    assert "epochs=" not in ran.stderr, ran.stderr
    ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--resume", str(state),
                  "--epoch", "2")  # fmt: skip
    assert ran.returncode == 1
    assert "give --epoch 1 or less" in ran.stderr and "epoch=" not in ran.stderr, ran.stderr


# -- a full disk, said of the output ------------------------------------------------------


def test_a_full_standard_output_is_named(corpus: Path) -> None:
    with open("/dev/full", "wb") as full:
        ran = subprocess.run([*OWT, "stream", str(corpus), "-j", "0", "-q", "--jsonl"],
                             stdout=full, stderr=subprocess.PIPE, timeout=120,
                             check=False)  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.decode() == (
        "owt: error: cannot write standard output (--jsonl): No space left on device\n"
    )


def test_what_a_command_prints_on_a_full_standard_output_is_named(tmp_path: Path) -> None:
    """``owt synth --where > /dev/full`` said only "[Errno 28] No space left on device"."""
    with open("/dev/full", "wb") as full:
        ran = subprocess.run([*OWT, "synth", "--where"], stdout=full, stderr=subprocess.PIPE,
                             timeout=120, check=False,
                             env={**os.environ, "OWT_CACHE_DIR": str(tmp_path)})  # fmt: skip
    assert ran.returncode == 1
    said = ran.stderr.decode().splitlines()
    assert said == ["owt: error: cannot write standard output: No space left on device"], said


def test_a_state_out_on_a_full_disk_is_named(
    corpus: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def full(path: object, data: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(summary, "atomic_write", full)
    state = tmp_path / "s.json"
    ran = run_owt(capsys, "stream", str(corpus), "-j", "0", "-q", "--take", "5",
                  "--state-out", str(state))  # fmt: skip
    assert ran.returncode == 1
    assert ran.stderr.endswith(
        f"owt: error: cannot write the state to {state}: No space left on device\n"
    ), ran.stderr


@pytest.mark.parametrize(
    ("flags", "idle"),
    [(["--seed", "3"], "--seed shapes"), (["--shuffle-buffer", "10"], "--shuffle-buffer shapes"),
     (["--seed", "3", "--shuffle-buffer", "10"], "--seed and --shuffle-buffer shape")],
)  # fmt: skip
def test_no_shuffle_refuses_the_flags_of_the_shuffle(
    small_corpus: Path, capsys: pytest.CaptureFixture[str], flags: list[str], idle: str
) -> None:
    """``--no-shuffle`` with ``--seed`` or ``--shuffle-buffer``: they would do nothing (yet
    enter the state, which a resume with other such flags then refused); refused, exit 2."""
    ran = run_owt(capsys, "stream", str(small_corpus), "--no-shuffle", *flags, "-q", "--jsonl")
    assert ran.returncode == 2 and f"{idle} the shuffle: leave out --no-shuffle" in ran.stderr


def test_no_shuffle_keeps_the_seed_of_best_fit_s_rows(
    small_corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed orders each best-fit window's rows, shuffled or not: allowed there."""
    args = ["stream", str(small_corpus), "--no-shuffle", "--pack", "bestfit", "--tokenizer",
            "bytes", "--seq-len", "64", "--take", "3", "-q"]  # fmt: skip
    assert run_owt(capsys, *args, "--seed", "3").returncode == 0


# -- --resume parses its file once, and names a damaged field of any kind of state ------------


@pytest.mark.parametrize("kind", ["openwebtext-batches/2", "openwebtext-state/2"])
def test_a_resume_file_is_parsed_once_and_its_bad_field_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """``read_state`` parsed a state twice (the second time to say what was wrong), and said a
    batches or mixture state's bad field without its dotted path (``StateError.field``)."""
    from openwebtext import StateError, codec

    state = tmp_path / "s.json"
    bad = {"seq_len": True} if "batches" in kind else {"config": [], "position": {}}
    state.write_text(json.dumps({"format": kind, **bad}))
    parsed: list[bytes] = []
    real = codec.parse
    monkeypatch.setattr(codec, "parse", lambda data: parsed.append(data) or real(data))
    with pytest.raises(StateError) as caught:
        summary.read_state(str(state))
    assert len(parsed) == 1
    assert caught.value.field == next(iter(bad))
    assert str(caught.value).startswith(f"{state}: ")
