"""Files the library reads whole beside a corpus or an output (a token file's ``meta.json``, the
counts cache, a run's progress and ``meta.json``, an index or footer cache, a tokenizer's
file) are read by ``codec.read_file``: a regular file's only, bounded (red team, session 27: a
FIFO put in a ``meta.json``'s or the counts cache's place hung the run forever, waiting for a
writer; a ``meta.json`` linked to ``/dev/zero`` died in a bare ``MemoryError``). A damaged cache
is ignored with a warning and rebuilt; a record a run reads is an error naming the file."""

from __future__ import annotations

import errno
import glob
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader, OWTError
from openwebtext.codec import read_file
from openwebtext.synth import write_corpus
from openwebtext.tokenfiles.megatron import megatron_index

pytestmark = pytest.mark.timeout(30)  # (a regression waits on a FIFO: fail, not hang)


def _token_file(folder: Path) -> Path:
    folder.mkdir()
    np.array([1, 2, 50256, 3, 50256], np.uint16).tofile(folder / "train.bin")
    (folder / "train.idx").write_bytes(megatron_index(np.array([3, 5]), np.dtype(np.uint16)))
    return folder / "train.bin"


def _no_file(path: Path, kind: str) -> None:
    """Put a FIFO, a link to a device or a folder in ``path``'s place."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_meta_json_that_is_no_file_is_an_error_naming_it(tmp_path: Path, kind: str) -> None:
    path = _token_file(tmp_path / "tok")
    _no_file(path.parent / "meta.json", kind)
    with pytest.raises(OWTError, match=r"meta\.json: cannot read it: not a regular file"):
        Corpus.open_tokens(str(path))


def test_a_counts_cache_that_is_a_fifo_is_counted_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "corpus"
    write_corpus(str(folder), subsets=1, members=2, docs=10, seed=1)
    with Loader(str(folder), workers=0, world_size=2, rank=0).iter() as it:
        first = [doc.name for doc in it]
    (cache,) = glob.glob(str(folder / ".owt-counts-*.json"))
    os.remove(cache)
    os.mkfifo(cache)
    caplog.set_level(logging.WARNING, "openwebtext")
    with Loader(str(folder), workers=0, world_size=2, rank=0).iter() as it:
        assert [doc.name for doc in it] == first
    assert "is damaged" in caplog.text and "not a regular file" in caplog.text


def test_read_file_is_bounded_and_reads_regular_files(tmp_path: Path) -> None:
    small = tmp_path / "small.json"
    small.write_bytes(b"{}")
    assert read_file(small) == b"{}" and read_file(small, most=2) == b"{}"
    with pytest.raises(OSError) as info:
        read_file(small, most=1)
    assert info.value.errno == errno.EFBIG
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing.json")


def test_a_tokenizer_file_that_is_a_fifo_is_an_error(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    from openwebtext import load_tokenizer

    fifo = tmp_path / "tokenizer.json"
    os.mkfifo(fifo)
    with pytest.raises(OWTError, match="not a regular file"):
        load_tokenizer(f"hf:{fifo}")


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
@pytest.mark.parametrize("which", ["ids", "idx", "ds", "ds.index", "llmc"])
def test_a_token_file_or_index_that_is_no_file_is_an_error(
    tmp_path: Path, which: str, kind: str
) -> None:
    """``open_token_file`` and the index readers open through ``codec.open_regular`` (session
    28: a FIFO given as a token file hung ``open_token_file`` forever; a FIFO or a folder in a
    Megatron ``.idx``'s place was read as no index, the ids as nanoGPT's)."""
    from openwebtext.tokenfiles import (
        open_token_file,
        read_datatrove_index,
        read_llmc_header,
        read_megatron_index,
    )

    path = _token_file(tmp_path / "tok")
    ds = path.with_suffix(".ds")
    ds.write_bytes(path.read_bytes())
    Path(f"{ds}.index").write_bytes(np.array([3, 5], "<u8").tobytes())
    index, shard = Path(f"{ds}.index"), tmp_path / "tok" / "shard.bin"
    target = {"ids": path, "idx": path.with_suffix(".idx"), "ds": ds, "ds.index": index,
              "llmc": shard}[which]  # fmt: skip
    _no_file(target, kind)
    opened = ds if which.startswith("ds") else path if which != "llmc" else target
    with pytest.raises((OSError, OWTError), match="not a regular file") as got:
        open_token_file(opened, eot=50256)
    assert target.name in str(got.value)
    reader = {"idx": lambda: read_megatron_index(target), "llmc": lambda: read_llmc_header(target),
              "ds.index": lambda: read_datatrove_index(target, 5)}.get(which)  # fmt: skip
    if reader is not None:
        with pytest.raises(OSError, match="not a regular file"):
            reader()


def test_a_state_file_read_by_path_is_a_regular_files(tmp_path: Path) -> None:
    """``load_state(path)`` reads through ``codec.read_file`` (``/dev/zero`` was read until
    memory ran out; the CLI reads a pipe's state itself, ``cli.summary._state_bytes``)."""
    from openwebtext.errors import StateError
    from openwebtext.stream.state import load_state

    with pytest.raises(StateError, match="/dev/zero: cannot read the state: not a regular file"):
        load_state("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(StateError, match="not a regular file"):
        load_state(tmp_path / "fifo")
