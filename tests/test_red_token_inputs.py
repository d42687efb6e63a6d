"""What a red team of token inputs found: ids of a signed dtype below 0, a Megatron index of
float ids, the index of no document, an llm.c shard cut inside its header. Each an error
naming the file or a counted skip, never an id outside the vocabulary handed out."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.engine.raw import UnitBytes
from openwebtext.engine.tokens import TokenReader
from openwebtext.errors import CorpusError, CorruptDocument
from openwebtext.prepare import PrepareOptions, prepare, write_format
from openwebtext.tokenfiles import (
    TokenFileError,
    llmc_header,
    megatron_index,
    open_token_file,
    read_llmc_header,
    read_megatron_index,
)

GPT2_EOT, BYTES_EOT = 50256, 256


def _megatron_idx(code: int, sizes: list[int], itemsize: int) -> bytes:
    """An ``.idx`` as megatron-core's ``_IndexWriter`` writes one sequence per document:
    header, int32 sizes, an int64 byte pointer per sequence, int64 document indices from 0."""
    head = struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, code, len(sizes), len(sizes) + 1)
    pointers = np.concatenate([[0], np.cumsum(sizes)])[:-1] * itemsize
    return b"".join([
        head,
        np.array(sizes, "<i4").tobytes(),
        np.array(pointers, "<i8").tobytes(),
        np.arange(len(sizes) + 1, dtype="<i8").tobytes(),
    ])  # fmt: skip


def _read(path: Path, tokenizer: str, **open_options: object) -> tuple[list[list[int]], int]:
    """The documents handed out under skip, and how many were skipped."""
    corpus = Corpus.open_tokens(path, **open_options)  # type: ignore[arg-type]
    loader = Loader(corpus, tokenizer=tokenizer, workers=0, shuffle=False, on_error="skip")
    with loader.iter() as it:
        docs = [d.tokens.tolist() for d in it]  # type: ignore[union-attr]
        return docs, it.stats.skipped_documents


# -- an id below 0 (a signed dtype's) is never handed out -------------------------------------


def test_a_negative_id_of_a_signed_megatron_file_is_a_document_error(tmp_path: Path) -> None:
    """An int16 Megatron file (code 3) read with GPT-2 (2-byte ids, so the width check
    passes): its -7 was handed out as 65529, past the vocabulary, and -15280 as 50256."""
    ids = np.array([5, -7, -15280, 9, 10, 1, 2, -15280], "<i2")
    ids.tofile(tmp_path / "train.bin")
    (tmp_path / "train.idx").write_bytes(_megatron_idx(3, [3, 2, 3], 2))
    corpus = Corpus.open_tokens(tmp_path / "train.bin")
    with pytest.raises(CorruptDocument, match=r"vocabulary.*\(e\.g\. -7\)") as raised:
        list(Loader(corpus, tokenizer="gpt2", workers=0, shuffle=False))
    assert raised.value.path == str(tmp_path / "train.bin") and raised.value.document == "0"
    docs, skipped = _read(tmp_path / "train.bin", "gpt2")
    assert (docs, skipped) == ([[9, 10]], 2)  # the first and the last hold ids below 0


@pytest.mark.parametrize("name", ["train.bin", "train.ds"])
def test_a_negative_id_of_a_signed_dtype_given_is_a_document_error(
    tmp_path: Path, name: str
) -> None:
    """A bare ``train.bin`` or a datatrove ``.ds`` opened with ``dtype="int16"`` and read with
    the bytes tokenizer (2-byte ids): -200 was handed out as 65336, -32512 as 33024."""
    ids = np.array([1, 2, BYTES_EOT, 3, -200, BYTES_EOT, 4, BYTES_EOT, -32512, BYTES_EOT], "<i2")
    ids.tofile(tmp_path / name)
    if name.endswith(".ds"):
        (tmp_path / (name + ".index")).write_bytes(np.array([3, 6, 8, 10], "<u8").tobytes())
    docs, skipped = _read(tmp_path / name, "bytes", eot=BYTES_EOT, dtype="int16")
    assert (docs, skipped) == ([[1, 2, BYTES_EOT], [4, BYTES_EOT]], 2)


@pytest.mark.parametrize(
    ("dtype", "vocab"),
    [("int8", 100), ("int16", 257), ("int16", 50257), ("int32", 100277), ("int64", 128256)],
)
def test_the_reader_leaves_out_every_document_with_an_id_below_0(
    tmp_path: Path, dtype: str, vocab: int
) -> None:
    """Every signed width, with a vocabulary below and above half its range (a negative id
    read as unsigned is past the first, never past the second)."""
    eot = 99
    ids = np.array([1, eot, -1, eot, 2, eot, np.iinfo(dtype).min, 3, eot], dtype)
    path = tmp_path / "train.bin"
    ids.astype(np.dtype(dtype).newbyteorder("<")).tofile(path)
    corpus = Corpus.open_tokens(path, eot=eot, dtype=dtype)
    reader = TokenReader(UnitBytes(), None, eot, vocab)
    (unit,) = corpus.units
    member = reader.read(unit)
    assert [e.document for e in member.dropped] == ["1", "3"]  # type: ignore[attr-defined]
    assert [o >= 0 for o in member.offsets] == [True, False, True, False]
    assert member.counts == [2, 0, 2, 0]


# -- float ids: refused when the index is read -------------------------------------------------


@pytest.mark.parametrize(("code", "dtype"), [(6, "<f8"), (7, "<f4")])
def test_a_megatron_index_of_float_ids_is_refused_at_open(
    tmp_path: Path, code: int, dtype: str
) -> None:
    """megatron-core's float codes: a NaN among the ids was a WorkerError ("unexpected
    ValueError: cannot convert float NaN to integer"), the label of a bug."""
    np.array([5, np.nan, GPT2_EOT, 9, GPT2_EOT], dtype).tofile(tmp_path / "train.bin")
    (tmp_path / "train.idx").write_bytes(_megatron_idx(code, [3, 2], np.dtype(dtype).itemsize))
    with pytest.raises(TokenFileError, match="token ids are integers") as raised:
        Corpus.open_tokens(tmp_path / "train.bin")
    assert raised.value.path == str(tmp_path / "train.idx")
    with pytest.raises(TokenFileError, match="integers"):
        read_megatron_index(tmp_path / "train.idx")


# -- the index of no document: what megatron-core writes -------------------------------------


def test_the_megatron_index_of_no_document_is_megatron_cores(tmp_path: Path) -> None:
    """megatron-core writes a pointer per sequence: none for none (42 bytes); a 50-byte
    index with one pointer for no sequence was written, then refused as damaged."""
    body = megatron_index(np.zeros(0, np.int64), np.dtype("<u2"))
    assert body == _megatron_idx(8, [], 2) and len(body) == 42
    assert read_megatron_index(tmp_path / "x.idx", body)[1].tolist() == []
    ends = np.array([3, 5, 9])
    assert megatron_index(ends, np.dtype("<u2")) == _megatron_idx(8, [3, 2, 4], 2)


def test_a_run_with_an_empty_val_split_reads_back_in_megatron_format(tmp_path: Path) -> None:
    """``owt tokenize --format megatron`` of a corpus whose (hash) val split is empty: its
    own ``val.idx`` was called damaged."""
    source = tmp_path / "a.jsonl"
    source.write_text("".join(f'{{"text": "document number {i}"}}\n' for i in range(5)))
    out = tmp_path / "out"
    prepare(Corpus.open(source), out, PrepareOptions(tokenizer="bytes", workers=0))
    assert (out / "val.bin").stat().st_size == 0
    write_format(out, "megatron")
    assert (out / "val.idx").read_bytes() == _megatron_idx(8, [], 2)
    assert open_token_file(out / "val.bin").ends.tolist() == []
    with pytest.raises(CorpusError, match="no document in these token files") as raised:
        Corpus.open_tokens(out / "val.bin")
    assert not isinstance(raised.value, TokenFileError)
    assert len(Corpus.open_tokens(out / "train.bin").units) == 1


# -- a file cut inside its header: the format's error, before the parse ------------------------


@pytest.mark.parametrize("size", [5, 378, 1023])
def test_an_llmc_shard_cut_inside_its_header_is_an_error_naming_it(
    tmp_path: Path, size: int
) -> None:
    """Cut at a length that is not whole int32s: a bare numpy ValueError ("buffer size must
    be a multiple of element size") from ``Corpus.open_tokens``."""
    ids = np.array([1, 2, GPT2_EOT, 3, GPT2_EOT], "<u2")
    path = tmp_path / "train_000000.bin"
    path.write_bytes((llmc_header(len(ids)) + ids.tobytes())[:size])
    with pytest.raises(TokenFileError, match=r"shorter than an llm\.c header") as raised:
        Corpus.open_tokens(path)
    assert raised.value.path == str(path)
    with pytest.raises(TokenFileError, match=rf"{size} bytes, shorter"):
        read_llmc_header(path)
