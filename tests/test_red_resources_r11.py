"""What a red team of resource exhaustion (session 34) found: a machine that ran out of file
descriptors or memory was counted as bad data."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, WorkerError, cli, prepare, synth
from openwebtext.cli import jsonl
from openwebtext.codec import read_file
from openwebtext.engine import raw, tables
from openwebtext.engine.tasks import failure
from openwebtext.errors import OutOfResources, OutputError, ran_out, read_error
from openwebtext.index import Corpus
from openwebtext.prepare import convert
from openwebtext.prepare.workdir import PrepareError
from openwebtext.records import Unit
from openwebtext.source import fetching
from openwebtext.source.retry import Fatal
from openwebtext.stream import count_documents
from openwebtext.synth import write_corpus
from tables_support import write_parquet


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM])
def test_a_machine_out_of_descriptors_or_memory_is_never_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Under ``ulimit -n 24``, ``owt tokenize --on-error skip`` skipped 40 of 60 members
    ("cannot read: Too many open files") and finished with 0: a run with room then found the
    output done; ``owt index`` cached the short counts. A unit the machine could not open
    is ``OutOfResources`` (a ``WorkerError``), raised whatever ``on_error``."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=3, docs=4, seed=0, workers=1).path
    reading = raw.UnitBytes.read

    def read(self: Any, unit: Unit) -> bytes:
        if unit.member_index == 1:
            raise OSError(code, os.strerror(code))
        return reading(self, unit)

    monkeypatch.setattr(raw.UnitBytes, "read", read)
    for on_error in ("raise", "skip", "warn"):
        loader = Loader(corpus, workers=0, shuffle=False, on_error=on_error)
        with pytest.raises(OutOfResources, match=r"-2_data\.xz\]: cannot read: .*the machine ran"):
            list(loader)
        assert issubclass(OutOfResources, WorkerError)


def test_counting_never_counts_a_unit_the_machine_could_not_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count behind ``owt index`` and sharded runs applied ``on_error`` itself: under
    ``skip`` a unit it had no descriptor for was counted as no document, and cached so."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=3, docs=4, seed=0, workers=1).path
    reading = raw.UnitBytes.read

    def read(self: Any, unit: Unit) -> bytes:
        if unit.member_index == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return reading(self, unit)

    monkeypatch.setattr(raw.UnitBytes, "read", read)
    with pytest.raises(OutOfResources, match="Too many open files"):
        count_documents(Corpus.open(corpus), workers=0, on_error="skip")


def test_memory_error_reading_a_unit_is_out_of_resources() -> None:
    """A ``MemoryError`` while a worker read a unit became "unexpected MemoryError", a
    ``WorkerError`` that ``skip`` counted as a bad member."""
    unit = Unit("/c/a.tar", "a-1_data.xz", 0, 10, "xz", "a", 1)
    error = failure(MemoryError(), unit)
    assert isinstance(error, OutOfResources)
    assert str(error) == "out of memory reading /c/a.tar[a-1_data.xz]"
    assert not isinstance(failure(ValueError("x"), unit), OutOfResources)


def test_a_file_the_machine_cannot_open_is_not_skipped_at_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexing under ``skip`` left a file out (``skipped_files``) for a descriptor the
    machine did not have, as if the file were unreadable."""
    corpus = write_corpus(tmp_path / "c", subsets=2, members=1, docs=2, seed=0, workers=1).path
    opening = open

    def open_(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("urlsf_subset01.tar"):
            raise OSError(errno.EMFILE, "Too many open files")
        return opening(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", open_)
    with pytest.raises(OutOfResources, match=r"urlsf_subset01\.tar: cannot read: Too many"):
        Corpus.open(corpus, on_error="skip")


def test_a_small_record_file_is_read_without_asking_for_its_bound(tmp_path: Path) -> None:
    """``read_file`` of a 279-byte counts file asked for 256 MiB first (``read(most + 1)``):
    under ``ulimit -v 400000`` every ``owt`` command ended in a ``MemoryError`` traceback."""
    tracemalloc = pytest.importorskip("tracemalloc")
    path = tmp_path / "counts.json"
    path.write_text("x" * 279)
    tracemalloc.start()
    try:
        assert read_file(path) == b"x" * 279
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    with pytest.raises(OSError, match="more than 100 bytes"):
        path.write_text("x" * 101)
        read_file(path, most=100)


def test_out_of_memory_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``MemoryError`` reached ``owt``'s top as a traceback."""

    def run(args: object) -> int:
        raise MemoryError

    monkeypatch.setattr(cli.synth, "run", run)
    assert cli.main(["synth", "never-written"]) == 1
    assert capsys.readouterr().err == "owt: error: out of memory (fewer workers, -j, need less)\n"


def test_a_format_pass_on_a_full_disk_names_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--format megatron|llmc|datatrove`` on a full disk said ``[Errno 28] No space left on
    device`` and nothing else: the run's own pass named its folder, the format pass did not."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=1, docs=4, seed=0, workers=1).path
    out = tmp_path / "out"
    prepare.prepare(Corpus.open(corpus), out, prepare.PrepareOptions(tokenizer="bytes"))

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(convert, "_convert", full)
    with pytest.raises(PrepareError, match=rf"writing into {out}: No space left on device "
                       r"\(run the same command again to go on\)"):  # fmt: skip
        prepare.write_format(out, "megatron")


def test_a_synthetic_corpus_on_a_full_disk_names_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``owt synth`` on a full disk said a bare errno, with no path."""

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(synth.pack, "_fsync", full)
    out = tmp_path / "c"
    with pytest.raises(OutputError, match=rf"writing the corpus {out}: No space left on device"):
        write_corpus(out, subsets=1, members=1, docs=2, seed=0, workers=1)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_under_jsonl_leaves_no_line_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``owt stream --jsonl > file`` on a disk that fills: the write that failed had put part
    of a line in the file (349 bytes of no JSON), the state ending before it, so ``cat`` of
    the file and a resumed run's differed from one run. A regular file is truncated back to
    its last whole line, and the error says so."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=1, docs=40, seed=0, workers=1).path
    path = tmp_path / "out.jsonl"

    def writer() -> Any:
        fd = sys.stdout.fileno()

        def write(data: bytes, sent: list[int]) -> None:
            sent[0] = 0
            if not data:  # (nothing to write: as os.write's loop, no error)
                return
            sent[0] = os.write(fd, data[: len(data) // 2 + 7])  # (inside a line)
            raise OSError(errno.ENOSPC, "No space left on device")

        return write

    monkeypatch.setattr(jsonl, "_writer", writer)
    written: list[Any] = [None]
    with open(path, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        with Loader(corpus, workers=0).iter() as it, pytest.raises(
            OutputError, match=r"No space left on device \(the \d+ bytes of a line it cut taken "
            r"back: it ends with a whole line\)"
        ):  # fmt: skip
            jsonl.write_jsonl(it, written)
    text = path.read_text()
    assert text and text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]
    assert written[0] is not None  # (the mark of the last whole line: what the state says)
    assert [d["name"] for d in lines] == [d.name for d in Loader(corpus, workers=0)][: len(lines)]


def test_pyarrow_out_of_memory_is_not_a_corrupt_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow's ``ArrowMemoryError`` (a ``MemoryError`` and an ``ArrowException``) was
    caught as a damaged row group's error: under ``skip``, 0 documents of 10 and exit 0."""
    pa = pytest.importorskip("pyarrow")
    write_parquet(tmp_path / "p" / "a.parquet", [f"row {k}" for k in range(10)])

    def no_memory(*args: object) -> None:
        raise pa.ArrowMemoryError("malloc of size 64 failed")

    monkeypatch.setattr(tables.Footer, "column_at", no_memory)
    with pytest.raises(OutOfResources, match=r"out of memory reading .*a\.parquet"):
        list(Loader(tmp_path / "p", workers=0, on_error="skip"))


def test_out_of_resources_names_its_file_in_one_line() -> None:
    error = read_error(OSError(errno.EMFILE, "Too many open files"), "d/a\nb.tar", "m\n1.xz")
    assert isinstance(error, OutOfResources) and "\n" not in str(error)
    assert str(error).startswith("d/a\\nb.tar[m\\n1.xz]: cannot read: Too many open files")
    assert (error.path, error.member) == ("d/a\nb.tar", "m\n1.xz")


def test_a_remote_read_out_of_descriptors_is_not_a_corrupt_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ranged read whose retries ran out on the machine's shortage (every attempt: no
    socket, EMFILE) was a ``CorruptMember``, skipped under ``skip``."""

    def out_of_descriptors(*args: object, **kwargs: object) -> bytes:
        raise Fatal("GET bytes 0-9 failed 5 times in 1.0 s; last: [Errno 24] Too many open "
                    "files", OSError(errno.EMFILE, "Too many open files"))  # fmt: skip

    monkeypatch.setattr(fetching, "with_retries", out_of_descriptors)
    with pytest.raises(OutOfResources, match=r"x\.tar\[m\]: cannot read: GET bytes 0-9 failed"):
        fetching.fetch("http://127.0.0.1:9/x.tar", 0, 10, "m")
    assert ran_out(ValueError("wrapped").with_traceback(None)) is False
    wrapped = RuntimeError("a library's")
    wrapped.__cause__ = MemoryError()
    assert ran_out(wrapped)
