"""Behaviour that seeded bugs of round 11 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID). G1 (the shared-memory
refusal's slots) is pinned already, by
test_cli_hostile.py::test_shared_memory_refused_says_what_to_do."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.codec import read_file
from openwebtext.errors import CorpusError, CorruptDocument, OutOfResources
from openwebtext.index import inputs, jsonl
from openwebtext.synth import pack, write_corpus
from support import Owt, copy_corpus

OWT = [sys.executable, "-m", "openwebtext.cli"]


def _synth(folder: Path, subsets: int = 1, members: int = 1, docs: int = 3) -> Path:
    return write_corpus(folder, subsets=subsets, members=members, docs=docs, seed=0,
                        workers=1).path  # fmt: skip


# -- document names -----------------------------------------------------------------------------


def test_token_documents_keep_their_names_shuffled_with_documents_left_out(
    tmp_path: Path,
) -> None:
    """S2: a token document was named by ``name(js[k])`` (its index in its unit taken as its
    index in the block): shuffled over a block of several units with the held-out documents
    left out, documents came named "27", "28", "29" whatever they held (names the held-out
    split hashes, and a user reads to find a document)."""
    ids = np.array([[k + 1, 256] for k in range(40)], "<u2")  # document k: [k + 1, eot]
    (tmp_path / "ids.bin").write_bytes(ids.tobytes())  # (not train.bin: a split already)
    corpus = Corpus.open_tokens(tmp_path / "ids.bin", eot=256, unit_tokens=6)
    assert len(corpus.units) > 2
    docs = list(Loader(corpus, tokenizer="bytes", workers=0, shuffle=True, seed=1,
                       split="train", val_fraction=0.3))  # fmt: skip
    assert 0 < len(docs) < 40
    assert [d.name for d in docs] == [str(int(d.tokens[0]) - 1) for d in docs]


def test_a_bad_line_of_a_later_chunk_is_named_by_its_byte_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T3: a bad JSON line in a plain .jsonl's later chunk was named by its byte in the CHUNK
    (``w.jsonl@<start>``): the error named another document, one of the file's first."""
    monkeypatch.setattr(jsonl, "CHUNK_BYTES", 256)
    lines = [json.dumps({"text": f"document number {i} " * 3}).encode() + b"\n" for i in range(20)]
    lines[15] = b'{"text": oops}\n'
    (tmp_path / "w.jsonl").write_bytes(b"".join(lines))
    corpus = Corpus.open(tmp_path / "w.jsonl")
    assert len(corpus.units) > 2
    with pytest.raises(CorruptDocument) as caught:
        list(Loader(corpus, workers=0, shuffle=False))
    assert caught.value.document == f"w.jsonl@{sum(map(len, lines[:15]))}"


# -- the command line ---------------------------------------------------------------------------


def test_stream_jsonl_into_a_reader_that_closes_ends_quietly(
    small_corpus: Path, tmp_path: Path
) -> None:
    """C6: ``stdout_gone`` looked for POLLHUP only; a pipe whose reader closed says POLLERR
    (Linux), so ``owt stream --jsonl -j 0 | head -c 100`` took the broken pipe for another's
    and ended with 1 and "owt: error: [Errno 32] Broken pipe"."""
    corpus = copy_corpus(small_corpus, tmp_path)
    env = {**os.environ, "OWT_CACHE_DIR": str(tmp_path / "cache")}
    with subprocess.Popen([*OWT, "stream", str(corpus), "--jsonl", "-j", "0"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.read(100)
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 0 and err == b""


def test_a_library_warning_holding_a_newline_is_one_line(
    tmp_path: Path, owt: Owt, caplog: pytest.LogCaptureFixture
) -> None:
    """C3: the filter ``owt`` puts on the library's logger passed a record's message as it
    was: a damaged counts file in a folder named "c\\nx" was warned of in two lines."""
    path = _synth(tmp_path / "c\nx", members=2)
    beside = Corpus.open(path).counts_paths()[0]
    beside.write_text("{damaged")
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        ran = owt("stream", str(path), "-j", "0", "-q", "--take", "1")
    assert ran.returncode == 0, ran.stderr
    said = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0]


def test_an_output_error_naming_a_newline_is_one_line(
    small_corpus: Path, tmp_path: Path, owt: Owt
) -> None:
    """C8: ``owt``'s error line was its message as it was: ``--state-out`` into a missing
    folder named with a newline said "owt: error: ..." over two lines."""
    corpus = copy_corpus(small_corpus, tmp_path)
    out = tmp_path / "no\nsuch" / "s.json"
    ran = owt("stream", str(corpus), "-j", "0", "-q", "--state-out", str(out))
    assert ran.returncode == 1
    assert ran.stderr.startswith("owt: error: ") and ran.stderr.count("\n") == 1


def test_where_writes_a_cache_path_s_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    """F1: ``owt synth --where`` with stdout in ASCII wrote the path encoded as UTF-8 with
    replacements: a cache folder named with the byte 0xff was printed with "?" for it, a path
    that does not exist."""
    cache = os.fsdecode(os.fsencode(tmp_path) + b"/h\xffe")  # ("h\udcffe")
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "OWT_CACHE_DIR": cache}
    ran = subprocess.run([*OWT, "synth", "--where"], capture_output=True, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[0].startswith(os.fsencode(cache))


# -- indexing: the machine out of resources, files that cannot be opened ------------------------


def _refuse(errno_: int, suffix: str, real: Any) -> Any:
    def call(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.fspath(path).endswith(suffix):
            raise OSError(errno_, os.strerror(errno_))
        return real(path, *args, **kwargs)

    return call


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_stat_out_of_memory_is_out_of_resources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_error: str
) -> None:
    """I2: why a file ``os.stat`` refused (``_unreadable``) was the ENOMEM's OutOfResources
    returned as the file's error: a corpus file left out under "skip" (the machine's fault,
    not the file's), or a crash on it."""
    path = _synth(tmp_path / "c", subsets=2)
    monkeypatch.setattr(os, "stat", _refuse(errno.ENOMEM, "urlsf_subset01.tar", os.stat))
    with pytest.raises(OutOfResources, match=r"urlsf_subset01\.tar"):
        Corpus.open(path, on_error=on_error)  # type: ignore[arg-type]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_sniff_out_of_descriptors_is_out_of_resources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_error: str
) -> None:
    """I1: a folder's file of no corpus name whose first bytes could not be read for EMFILE
    was that OutOfResources returned as the file's error (a file left out, or a crash on
    it), not raised."""
    path = _synth(tmp_path / "c")
    (path / "notes.txt").write_text("not a corpus file\n")
    monkeypatch.setattr(inputs, "open", _refuse(errno.EMFILE, "notes.txt", open), raising=False)
    with pytest.raises(OutOfResources, match=r"notes\.txt"):
        Corpus.open(path, on_error=on_error)  # type: ignore[arg-type]


def test_a_file_that_cannot_be_opened_is_a_corpus_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E9: ``read_error`` made every error a ``CorruptMember`` whatever ``kind`` it was asked
    for: a corpus file this user may not open (EACCES) was said to be an inner member that
    fails to decompress."""
    path = _synth(tmp_path / "c", subsets=2)
    refuse = _refuse(errno.EACCES, "urlsf_subset01.tar", open)
    monkeypatch.setattr("openwebtext.index.local.open", refuse, raising=False)
    with pytest.raises(CorpusError, match="cannot read") as caught:
        Corpus.open(path)
    assert type(caught.value) is CorpusError
    assert [type(e) for e in Corpus.open(path, on_error="skip").skipped_files] == [CorpusError]


# -- files read whole, counts files, synth ------------------------------------------------------


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="procfs")
def test_a_file_whose_size_is_under_reported_is_read_whole() -> None:
    """R2: ``read_file`` read what the file's size said and one byte, and stopped: a file
    whose size the file system reports as 0 (procfs, some FUSE mounts) was its first byte."""
    data = read_file("/proc/self/status")
    assert data.startswith(b"Name:") and b"\nPid:" in data and data.endswith(b"\n")


def test_a_counts_file_that_is_a_fifo_is_said_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """L2: every OSError reading a counts file was said "cannot be read (...): not used", as
    a file of another user's: a FIFO in its place (never rewritten, as that one is not) too,
    where it is damaged, to be rewritten."""
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    corpus = Corpus.open(_synth(tmp_path / "c", members=2))
    os.mkfifo(corpus.counts_paths()[0])
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        assert corpus.load_counts() is None
    said = [r.getMessage() for r in caplog.records if "counts file" in r.getMessage()]
    assert len(said) == 1 and "is damaged" in said[0] and "cannot be read" not in said[0]


def test_synth_waits_longer_for_a_member_of_many_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Y1: the wait for a synth worker's member was ``_PATIENCE`` alone, whatever its
    documents: a member of many documents, longer to make than that, was taken for a stopped
    worker ("synth: a worker sent nothing for ... s") and the corpus never written."""
    monkeypatch.setattr(pack._InOrder, "_PATIENCE", 0.001)
    made = write_corpus(tmp_path / "c", subsets=1, members=2, docs=200, seed=0, workers=2,
                        preset=0)  # fmt: skip
    assert (made.path / "urlsf_subset00.tar").is_file()
