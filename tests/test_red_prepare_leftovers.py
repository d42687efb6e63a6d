"""An output folder of ``owt tokenize`` converges (red team, prepare leftovers): a run that
starts, or finds its work done, after an interrupt at any point leaves exactly the finished
files: no part, progress record, format pass record, temporary file or lock file of the
interrupted run, for either split rule and every format, locally and at a URL.

A kill is stood for in the process by ``_Kill`` (a ``BaseException``, as an interrupt is)
raised at one step, and what only a real kill leaves (an ``atomic_file``'s temporary file,
the lock file) is put in the folder as the kill leaves it; one test kills a process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.prepare import (
    PrepareError,
    PrepareOptions,
    Progress,
    outputs,
    prepare,
    write_format,
)
from openwebtext.prepare.lock import LOCK
from openwebtext.prepare.workdir import OUTPUTS, PROGRESS, Part, Workdir, owned, sha256_file
from support import in_read_only_mount, lock_file_read_only, s3_objects

FORMATS = ("megatron", "llmc", "datatrove")
SHARD = 20_000  # ids an llm.c shard holds at most here: several shards of train


class _Kill(BaseException):
    """A kill (or a Ctrl-C) at one step of a run."""


def _opts(**overrides: object) -> PrepareOptions:
    base: dict[str, object] = {"tokenizer": "bytes", "workers": 0, "val_fraction": 0.2}
    return PrepareOptions(**{**base, **overrides})  # type: ignore[arg-type]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _dead_lock(folder: Path) -> None:
    """The lock file a SIGKILLed run leaves (its holder, a process that is gone)."""
    body = {"pid": 2**22 + 17, "host": "gone", "since": "2026-01-01 00:00:00"}
    (folder / LOCK).write_text(json.dumps(body))


def _kill_at_unlink(
    monkeypatch: pytest.MonkeyPatch, when: Callable[[Path], bool]
) -> Callable[[], None]:
    """``Path.unlink`` of the first path ``when`` holds for raises ``_Kill`` (a kill there,
    nothing removed); the function returned puts ``Path.unlink`` back."""
    real = Path.unlink
    armed = [True]

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if armed[0] and when(self):
            armed[0] = False
            raise _Kill
        real(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    return lambda: monkeypatch.setattr(Path, "unlink", real)


def _killed_write(folder: Path, name: str, body: bytes = b"cut") -> Path:
    """The temporary file a write of ``name`` (``files.atomic_file``) killed before its
    rename leaves: ``.NAME.XXXXXXXX.tmp``, as ``tempfile`` names it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    os.write(fd, body)
    os.close(fd)
    return Path(tmp)


@pytest.fixture(scope="module")
def reference(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``reference(split, fmt, **options)``: the folder an uninterrupted run writes (made once)."""
    made: dict[tuple[Any, ...], Path] = {}

    def make(split: str = "hash", fmt: str | None = None, **options: object) -> Path:
        key = (split, fmt, tuple(sorted(options.items())))
        if key not in made:
            out = tmp_path_factory.mktemp("ref")
            prepare(Corpus.open(small_corpus), out, _opts(split_rule=split, **options))
            if fmt is not None:
                write_format(out, fmt, shard_tokens=SHARD)
            made[key] = out
        return made[key]

    return make


@pytest.fixture
def finished(small_corpus: Path, tmp_path: Path) -> Path:
    """The folder of a finished run (the ``hash`` rule: ``_opts()``)."""
    out = tmp_path / "out"
    prepare(Corpus.open(small_corpus), out, _opts())
    return out


@pytest.fixture
def kill_after_meta_json(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The next commit is killed right after it wrote ``meta.json`` (before it removed its
    parts and progress record)."""
    real = Workdir.write_json
    armed = [True]

    def write_json(self: Workdir, name: str, body: dict[str, Any]) -> None:
        real(self, name, body)
        if name == "meta.json" and armed[0]:
            armed[0] = False
            raise _Kill

    monkeypatch.setattr(Workdir, "write_json", write_json)
    yield
    monkeypatch.setattr(Workdir, "write_json", real)


# -- bug 1: a commit cut short after its meta.json ---------------------------------------


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_bug1_a_commit_cut_after_meta_json_is_finished_by_the_rerun(
    small_corpus: Path, tmp_path: Path, split: str, reference: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    real = Workdir.write_json

    def write_json(self: Workdir, name: str, body: dict[str, Any]) -> None:
        real(self, name, body)
        if name == "meta.json":
            raise _Kill

    monkeypatch.setattr(Workdir, "write_json", write_json)
    with pytest.raises(_Kill):
        prepare(corpus, out, _opts(split_rule=split))
    monkeypatch.setattr(Workdir, "write_json", real)
    assert (out / PROGRESS).exists()  # the commit was cut before it forgot the run
    _dead_lock(out)  # as a SIGKILL leaves it
    again = prepare(corpus, out, _opts(split_rule=split))
    assert again.already
    assert _files(out) == _files(reference(split))


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_bug1_after_a_commit_cut_after_meta_json_other_options_replace_the_folder(
    small_corpus: Path, tmp_path: Path, split: str, reference: Callable[..., Path],
    kill_after_meta_json: None,
) -> None:  # fmt: skip
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    with pytest.raises(_Kill):
        prepare(corpus, out, _opts(split_rule=split))
    report = prepare(corpus, out, _opts(split_rule=split, val_fraction=0.3))
    assert not report.already and not report.resumed
    assert _files(out) == _files(reference(split, val_fraction=0.3))


def test_bug1_at_a_url_a_commit_cut_after_meta_json_lets_other_options_replace_it(
    small_corpus: Path, s3_endpoint: str, reference: Callable[..., Path],
    kill_after_meta_json: None,
) -> None:  # fmt: skip
    """The staging folder of a URL is committed by the same code: its commit cut short after
    ``meta.json`` is finished, not refused as another run's progress."""
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    url = "s3://owt/leftovers-commit/"
    try:
        with pytest.raises(_Kill):
            prepare(corpus, url, _opts(split_rule="nanogpt"))
        report = prepare(corpus, url, _opts(split_rule="nanogpt", val_fraction=0.3))
        assert not report.already
        assert s3_objects(s3_endpoint, "leftovers-commit/") == _files(
            reference("nanogpt", val_fraction=0.3)
        )
        assert not outputs.staging(url).exists()
    finally:
        outputs.remove(outputs.staging(url))


def test_bug1_at_a_url_a_publish_cut_before_it_removed_its_staging_folder_leaves_none(
    small_corpus: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local copy of a published run (a whole output's size) does not outlive it."""
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    url = "s3://owt/leftovers-publish/"
    staging = outputs.staging(url)
    real = shutil.rmtree

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == staging:
            raise _Kill  # the publish uploaded meta.json, then was killed
        real(path, *args, **kwargs)

    try:
        monkeypatch.setattr(shutil, "rmtree", rmtree)
        with pytest.raises(_Kill):
            prepare(corpus, url, _opts())
        monkeypatch.setattr(shutil, "rmtree", real)
        assert (staging / "meta.json").exists()
        assert prepare(corpus, url, _opts()).already
        assert not staging.exists()
    finally:
        outputs.remove(staging)


def test_bug1_a_finished_folder_whose_rerun_finds_leftovers_sweeps_them(
    small_corpus: Path, tmp_path: Path, reference: Callable[..., Path]
) -> None:
    """Nothing to do, and what killed runs left beside the finished files goes: the lock
    file, parts no record goes on from, temporary files of the record and ``meta.json``."""
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    prepare(corpus, out, _opts())
    _dead_lock(out)
    for name in ("tokens.bin", "lengths.bin"):
        (out / f".{name}.part").write_bytes(b"\0" * 64)
    for name in ("meta.json", PROGRESS):
        _killed_write(out, name)
    assert prepare(corpus, out, _opts()).already
    assert _files(out) == _files(reference())


# -- bug 2: a format pass cut after its marker ----------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_bug2_a_format_pass_cut_after_its_marker_leaves_no_record(
    finished: Path, fmt: str, reference: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    out = finished
    record = f".{fmt}.progress.json"
    _format_pass_killed(  # between the marker and the record's removal
        out, fmt, monkeypatch, lambda p: p.name == record and (p.parent / f"{fmt}.json").exists()
    )
    assert (out / record).exists()
    _format_pass_finished(out, fmt, reference)


def _format_pass_killed(
    out: Path, fmt: str, monkeypatch: pytest.MonkeyPatch, at: Callable[[Path], bool]
) -> None:
    """A format pass into ``out`` killed at the removal of the first path ``at`` takes."""
    undo = _kill_at_unlink(monkeypatch, at)
    with pytest.raises(_Kill):
        write_format(out, fmt, shard_tokens=SHARD)
    undo()


def _format_pass_finished(out: Path, fmt: str, reference: Callable[..., Path]) -> None:
    """The pass run again: the folder holds the files of one never interrupted."""
    write_format(out, fmt, shard_tokens=SHARD)
    assert _files(out) == _files(reference("hash", fmt))


def test_bug2_at_a_url_a_format_pass_cut_after_its_marker_leaves_no_record(
    small_corpus: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Corpus.open(str(small_corpus), storage_options={"endpoint_url": s3_endpoint})
    url = "s3://owt/leftovers-format/"
    copy = outputs.staging(url, "fetch")
    try:
        prepare(corpus, url, _opts())
        undo = _kill_at_unlink(monkeypatch, lambda p: p.name == ".megatron.progress.json")
        with pytest.raises(_Kill):
            write_format(url, "megatron", corpus.storage)
        undo()
        assert (copy / ".megatron.progress.json").exists()
        write_format(url, "megatron", corpus.storage)
        assert "megatron.json" in s3_objects(s3_endpoint, "leftovers-format/")
        assert not [p.name for p in copy.iterdir() if p.name.startswith(".")]
    finally:
        outputs.remove(outputs.staging(url))
        outputs.remove(copy)


# -- bug 3: a finished format on a read-only folder ------------------------------------------



@pytest.mark.parametrize("fmt", FORMATS)
def test_bug3_a_finished_format_on_a_read_only_folder_is_nothing_to_do(
    small_corpus: Path, tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    prepare(corpus, out, _opts())
    marker = write_format(out, fmt, shard_tokens=SHARD)
    before = _files(out)
    _killed_write(out, "meta.json")  # a leftover it cannot sweep there: still nothing to do
    lock_file_read_only(monkeypatch)
    assert prepare(corpus, out, _opts()).already
    assert write_format(out, fmt, shard_tokens=SHARD) == marker
    # Something to write: the lock is needed, and its failure is named.
    with pytest.raises(PrepareError, match="cannot lock"):
        write_format(out, "datatrove" if fmt == "megatron" else "megatron")
    assert {n: b for n, b in _files(out).items() if not n.endswith(".tmp")} == before



def test_bug3_owt_tokenize_format_on_a_read_only_mount_says_nothing_to_do(
    small_corpus: Path, tmp_path: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a read-only mount")
    probe = in_read_only_mount(tmp_path, ["sh", "-c", f"! touch {tmp_path}/probe"])
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.strip()}")
    tokenize = [sys.executable, "-m", "openwebtext.cli", "tokenize", str(small_corpus),
                "-j", "0", "--tokenizer", "bytes", "-q"]  # fmt: skip
    for fmt in FORMATS:
        out = tmp_path / fmt
        subprocess.run([*tokenize, "--out", str(out), "--format", fmt], check=True, timeout=120)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    for fmt in FORMATS:
        again = in_read_only_mount(tmp_path, [*tokenize, "--out", str(tmp_path / fmt),
                                               "--format", fmt])  # fmt: skip
        assert again.returncode == 0, (fmt, again.stderr)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


# -- bug 4: every crash point of a commit and of a format pass -----------------------------


def _derived(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if owned(p.name) and p.name not in OUTPUTS}


def _crash_at(monkeypatch: pytest.MonkeyPatch, step: int) -> list[int]:
    """Raise ``_Kill`` at the ``step``-th rename or removal from now (each done first when it
    is a rename: a kill right after it). Returns the count so far, in a list."""
    count = [0]
    real_replace, real_unlink = os.replace, os.unlink

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        count[0] += 1
        real_replace(src, dst, *args, **kwargs)
        if count[0] == step:
            raise _Kill

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        if os.fspath(path).endswith(LOCK):  # (a kill there: the lock file of _dead_lock)
            real_unlink(path, *args, **kwargs)
            return
        count[0] += 1
        if count[0] == step:
            raise _Kill
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)
    return count


def _meta_describes_its_files(folder: Path) -> None:
    if not (folder / "meta.json").exists():
        return
    meta = json.loads((folder / "meta.json").read_text())
    for name, info in meta["files"].items():
        assert (folder / name).stat().st_size == info["bytes"], name
        assert sha256_file(folder / name) == info["sha256"], name


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_bug4_no_crash_point_of_a_commit_leaves_a_new_bin_beside_an_old_index(
    small_corpus: Path, tmp_path: Path, split: str, reference: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    corpus = Corpus.open(small_corpus)
    first = tmp_path / "first"
    prepare(corpus, first, _opts(split_rule=split))
    for fmt in FORMATS:
        write_format(first, fmt, shard_tokens=SHARD)
    old = _files(first)
    other = {"seed": 5} if split == "hash" else {"val_fraction": 0.3}
    expected = _files(reference(split, **other))
    step = 0
    while True:
        step += 1
        out = tmp_path / f"crash{step}"
        shutil.copytree(first, out)
        _crash_at(monkeypatch, step)
        try:
            prepare(corpus, out, _opts(split_rule=split, **other), checkpoint_seconds=60)
            finished = True
        except _Kill:
            finished = False
        monkeypatch.undo()
        # The earlier run whole, or none of its format files beside the new bin files.
        if _derived(out):
            assert {n: _files(out)[n] for n in ("train.bin", "val.bin")} == {
                n: old[n] for n in ("train.bin", "val.bin")
            }, (step, sorted(_derived(out)))
        _meta_describes_its_files(out)
        if finished:
            break
        prepare(corpus, out, _opts(split_rule=split, **other))
        assert _files(out) == expected, step
        shutil.rmtree(out)
    assert step > 5  # every rename and removal of the run was a crash point


@pytest.mark.slow  # (~20 s: a crash at every step of the pass; strays: test_red_prepare_r9.py)
def test_bug4_no_crash_point_of_a_format_pass_leaves_its_marker_beside_other_shards(
    small_corpus: Path, tmp_path: Path, reference: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """An llm.c pass with bigger shards over one with smaller: no moment has a marker (the
    folder's finished format) beside a shard it does not list (a trainer's glob takes it)."""
    first = tmp_path / "first"
    prepare(Corpus.open(small_corpus), first, _opts())
    write_format(first, "llmc", shard_tokens=SHARD // 4)
    expected = _files(reference("hash", "llmc"))
    step = 0
    while True:
        step += 1
        out = tmp_path / f"crash{step}"
        shutil.copytree(first, out)
        _crash_at(monkeypatch, step)
        try:
            write_format(out, "llmc", shard_tokens=SHARD)
            finished = True
        except _Kill:
            finished = False
        monkeypatch.undo()
        if (out / "llmc.json").exists():
            listed = set(json.loads((out / "llmc.json").read_text())["files"])
            shards = {p.name for p in out.iterdir() if p.name.startswith(("train_", "val_"))}
            assert shards == listed, (step, sorted(shards - listed))
        if finished:
            break
        write_format(out, "llmc", shard_tokens=SHARD)
        assert _files(out) == expected, step
        shutil.rmtree(out)


# -- bug 5: another split rule's parts ---------------------------------------------------


class _Stop(KeyboardInterrupt):
    pass


def _stop_after_first_unit(event: Progress) -> None:
    if event.phase == "tokenize" and event.done > 0:
        raise _Stop


def test_bug5_a_hash_run_restarted_after_an_interrupted_nanogpt_run_leaves_no_part(
    small_corpus: Path, tmp_path: Path, reference: Callable[..., Path]
) -> None:
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    with pytest.raises(_Stop):
        prepare(corpus, out, _opts(split_rule="nanogpt"), progress=_stop_after_first_unit,
                checkpoint_seconds=0)  # fmt: skip
    assert (out / PROGRESS).exists() and (out / ".tokens.bin.part").exists()
    with pytest.raises(PrepareError, match="--restart"):
        prepare(corpus, out, _opts())
    prepare(corpus, out, _opts(), restart=True)
    assert _files(out) == _files(reference())
    assert prepare(corpus, out, _opts()).already
    assert _files(out) == _files(reference())


def test_bug5_a_hash_run_after_a_nanogpt_run_killed_before_a_checkpoint_leaves_no_part(
    small_corpus: Path, tmp_path: Path, reference: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    corpus, out = Corpus.open(small_corpus), tmp_path / "out"
    real = Part.write

    def write(self: Part, data: bytes | memoryview) -> None:
        real(self, data)
        raise _Kill  # amid a unit: no checkpoint is taken on the way out

    monkeypatch.setattr(Part, "write", write)
    with pytest.raises(_Kill):
        prepare(corpus, out, _opts(split_rule="nanogpt"), checkpoint_seconds=60)
    monkeypatch.setattr(Part, "write", real)
    assert not (out / PROGRESS).exists() and (out / ".tokens.bin.part").exists()
    report = prepare(corpus, out, _opts())
    assert not report.resumed
    assert _files(out) == _files(reference())


# -- bug 6: temporary files of writes a kill cut short -------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_bug6_a_format_write_cut_by_a_kill_leaves_no_temporary_file(
    finished: Path, fmt: str, reference: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    out = finished
    first = {"megatron": "train.idx", "llmc": "train_000000.bin", "datatrove": "train.ds.index"}
    # A pass killed while it wrote its first file (what the kill leaves is put there),
    # then one killed after its marker (its record left too).
    _killed_write(out, first[fmt], b"\0" * 4096)
    _killed_write(out, f"{fmt}.json")
    _killed_write(out, f".{fmt}.progress.json")
    (out / ".train.ds.link").write_bytes(b"")
    _format_pass_killed(out, fmt, monkeypatch, lambda p: p.name == f".{fmt}.progress.json")
    _killed_write(out, "val.idx" if fmt == "megatron" else "val.ds.index")
    _format_pass_finished(out, fmt, reference)


def test_bug6_a_sigkilled_llmc_shard_write_leaves_no_temporary_file(
    small_corpus: Path, finished: Path, reference: Callable[..., Path]
) -> None:
    """A real SIGKILL while an llm.c shard is written (its first bytes on disk)."""
    out = finished
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd to name the file being written")
    code = (
        "import os, signal\n"
        "from openwebtext.prepare import write_format\n"
        "real = os.fsync\n"
        "def fsync(fd):\n"  # atomic_file's, before its rename: the shard's bytes are there
        "    name = os.path.basename(os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    if name.startswith('.train_000000.bin.'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    real(fd)\n"
        "os.fsync = fsync\n"
        f"write_format({str(out)!r}, 'llmc', shard_tokens={SHARD})\n"
    )
    killed = subprocess.run([sys.executable, "-c", code], timeout=120, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # what the kill left
    write_format(out, "llmc", shard_tokens=SHARD)
    assert _files(out) == _files(reference("hash", "llmc"))
    assert prepare(Corpus.open(small_corpus), out, _opts()).already  # and nothing more
    assert _files(out) == _files(reference("hash", "llmc"))
