"""What a red team (session 31) found on the input kinds beside tars."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptMember
from openwebtext.tokenfiles import TokenFileError
from support import copy_run, outer_tar, sample_docs, xz_member
from tables_support import sample_texts, write_jsonl


def _gzipped_tar(path: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    path.write_bytes(gzip.compress(buffer.getvalue()))
    return path


@pytest.mark.parametrize("name", ["x.json.gz", "x.jsonl.gz"])
def test_a_gzipped_tar_named_json_lines_is_said_as_a_tar(tmp_path: Path, name: str) -> None:
    """It was read line by line, its first said as "not a JSON object with a string 'text'"
    (and under skip each of its lines was a skipped document)."""
    _gzipped_tar(tmp_path / name)
    with pytest.raises(CorruptMember, match=r"named gzip JSON lines, but its gzip data holds "
                       r"tar, not JSON lines") as info:  # fmt: skip
        list(Loader(str(tmp_path), workers=0))
    assert info.value.member == name
    write_jsonl(tmp_path / "b.jsonl", sample_texts(3))
    documents = Loader(str(tmp_path), workers=0, on_error="skip").iter()
    assert len(list(documents)) == 3
    assert (documents.stats.skipped_members, documents.stats.skipped_documents) == (1, 0)


def test_an_index_that_empties_a_document_is_a_corrupt_member(
    token_run: Path, tmp_path: Path
) -> None:
    """An end set equal to the one before it: an empty document was handed out, and the next
    held two (its check read the previous document's end-of-text)."""
    ds = copy_run(token_run, tmp_path / "ds", ("train.ds", "train.ds.index"))
    ends = np.fromfile(ds / "train.ds.index", dtype="<u8")
    for k, end in ((0, 0), (3, int(ends[2]))):
        edited = ends.copy()
        edited[k] = end
        edited.tofile(ds / "train.ds.index")
        with pytest.raises(CorruptMember, match=rf"document {k} holds no id, not even the "
                           r"end-of-text id 256 its run's meta\.json records"):  # fmt: skip
            list(Loader(Corpus.open_tokens(ds / "train.ds"), shuffle=False, workers=0))
    mega = copy_run(token_run, tmp_path / "mega", ("train.bin", "train.idx"))
    idx = bytearray((mega / "train.idx").read_bytes())
    n = struct.unpack("<Q", idx[18:26])[0]
    sizes = np.frombuffer(bytes(idx[34 : 34 + 4 * n]), "<i4").copy()
    sizes[1] += sizes[0]
    sizes[0] = 0  # (the pointers made to follow)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1]) * 2]).astype("<i8")
    idx[34 : 34 + 4 * n], idx[34 + 4 * n : 34 + 12 * n] = sizes.tobytes(), pointers.tobytes()
    (mega / "train.idx").write_bytes(bytes(idx))
    with pytest.raises(CorruptMember, match=r"document 0 holds no id"):
        list(Loader(Corpus.open_tokens(mega / "train.bin"), shuffle=False, workers=0))


def test_an_emptied_llmc_shard_is_refused_by_its_marker(token_run: Path, tmp_path: Path) -> None:
    """A shard cut to no byte has no llm.c header: it was read as a bare ``.bin`` of no id,
    its documents lost without a count. ``llmc.json`` records its size."""
    shards = sorted(p.name for p in token_run.glob("train_*.bin"))
    run = copy_run(token_run, tmp_path / "run", ("llmc.json", *shards))
    (run / shards[-1]).write_bytes(b"")
    with pytest.raises(TokenFileError, match=rf"{shards[-1]}: 0 bytes, not the \d+ its run's "
                       r"llmc\.json records"):  # fmt: skip
        Corpus.open_tokens(run / shards[-1])
    assert Corpus.open_tokens(run / shards[0]).units  # (the others: read)
    # Another program's marker, or a damaged one (convert writes it again), says nothing: the
    # review found a user's megatron.json beside a run made its files unreadable.
    (run / "megatron.json").write_text('{"note": "mine", "tensor_parallel": 2}')
    (run / "llmc.json").write_text("{")
    assert Corpus.open_tokens(run / shards[0]).units
    shutil.copy(token_run / "train.bin", run / "train.bin")
    assert Corpus.open_tokens(run / "train.bin").units


def _outer_with_size(path: Path, size_field: bytes) -> Path:
    """An outer tar of three members, the second's header's size field ``size_field`` (12
    bytes: octal or base-256), its checksum made again."""
    members = [(f"{c}_data.xz", xz_member(sample_docs(c, 2))) for c in "abc"]
    outer_tar(path, members)
    raw = bytearray(path.read_bytes())
    with tarfile.open(path) as tar:
        at = tar.getmember("b_data.xz").offset
    header = raw[at : at + 512]
    header[124:136] = size_field
    header[148:156] = b"        "
    header[148:156] = b"%06o\x00 " % sum(header)
    raw[at : at + 512] = header
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("size", [-5, -1536])
def test_a_member_header_of_a_negative_size_is_a_damaged_header(
    tmp_path: Path, size: int
) -> None:
    """Said as "cannot read: Invalid argument", the whole file left out under skip; -1536
    took the walk back onto a header it had read, for ever."""
    field = bytes([0xFF]) + (size % 256**11).to_bytes(11, "big")  # base-256, negative
    path = _outer_with_size(tmp_path / "urlsf_subset00.tar", field)
    with pytest.raises(CorpusError, match=rf"broken tar after this member: a header says a "
                       rf"negative size, {size}, for 'b_data.xz'") as info:  # fmt: skip
        Corpus.open(path)
    assert info.value.member == "a_data.xz"
    assert len(Corpus.open(path, on_error="skip").units) == 1  # (the member before it: kept)


def test_a_member_header_of_a_huge_size_is_a_member_cut_short(tmp_path: Path) -> None:
    """A size of 2**60 in a small file: its read asked for a buffer of that size (an
    "unexpected MemoryError", said as a bug); it is a member cut short, as read remotely."""
    path = _outer_with_size(tmp_path / "urlsf_subset00.tar", bytes([0x80]) + (2**60).to_bytes(11,
                                                                                      "big"))
    with pytest.raises(CorruptMember, match=r"b_data.xz\]: file is truncated: \d+ of "
                       rf"{2**60} bytes"):  # fmt: skip
        list(Loader(path, shuffle=False, workers=0))


def test_compressed_json_lines_that_only_begin_like_another_format_are_read(
    tmp_path: Path,
) -> None:
    """The probe of this session's check: a BOM putting "ustar" of "mustard" at byte 257 was
    refused as a tar, and a first line beginning with parquet's magic lost the valid lines
    after it under skip (now: the one bad line skipped)."""
    lines = [json.dumps({"text": "x" * 242 + " mustard " + "y" * 20}), *(json.dumps({"text": t})
             for t in sample_texts(3))]  # fmt: skip
    bom = tmp_path / "bom" / "a.jsonl.gz"
    bom.parent.mkdir()
    bom.write_bytes(gzip.compress(("\ufeff" + "\n".join(lines) + "\n").encode()))
    assert gzip.decompress(bom.read_bytes())[257:262] == b"ustar"
    assert len(list(Loader(bom.parent, workers=0))) == 4
    magic = tmp_path / "magic" / "a.jsonl.gz"
    magic.parent.mkdir()
    magic.write_bytes(gzip.compress(("PAR1,header,line\n" + "\n".join(lines[1:]) + "\n").encode()))
    documents = Loader(magic.parent, workers=0, on_error="skip").iter()
    assert len(list(documents)) == 3
    assert (documents.stats.skipped_documents, documents.stats.skipped_members) == (1, 0)
