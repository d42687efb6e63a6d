"""Behaviour that seeded bugs of round 8 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID: F token files, P parquet,
O outer tars, E error policy, T token index, R retries, D redaction, J JSON lines, SH shapes,
K masks)."""

from __future__ import annotations

import gzip
import json
import os
import struct
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest

import remote_servers
from openwebtext import Corpus, Loader, reshard
from openwebtext.errors import CorpusError
from openwebtext.index import Counts
from openwebtext.index.jsonl import jsonl_units
from openwebtext.index.outer import LocalFile
from openwebtext.tokenfiles import TokenFileError, read_llmc_header
from openwebtext.tokenfiles.llmc import llmc_header
from openwebtext.tokenfiles.megatron import MEGATRON_MAGIC, megatron_index
from remote_servers import RangeServer
from support import outer_tar

#: A megatron .idx's head: magic, version, dtype code, sequences, documents (its format's).
_HEAD = struct.Struct("<9sQBQQ")
isolated_storage = remote_servers.isolated_storage  # fixture: a fresh cache, quick retries

EOT = 50256


def _ids(path: Path, ids: list[int]) -> Path:
    np.asarray(ids, dtype="<u2").tofile(path)
    return path


def _members(path: Path | str, **options: object) -> list[str]:
    return [u.member for u in Corpus.open_tokens(path, **options).units]  # type: ignore[arg-type]


def _meta(folder: Path, **fields: object) -> None:
    config = {"tokenizer": "gpt2", "fingerprint": "f", "dtype": "uint16", "eot": EOT,
              "n_vocab": 50257}  # fmt: skip
    meta = {"format": "openwebtext-prepare/2", "config": config, **fields}
    (folder / "meta.json").write_text(json.dumps(meta))


# -- token files ---------------------------------------------------------------------------


def test_an_llmc_header_of_a_damaged_magic_is_not_read_as_ids(tmp_path: Path) -> None:
    """F9: a header whose count fits the size is an llm.c shard even when its version is not."""
    head = bytearray(llmc_header(2))
    head[0:8] = b"\1\0\0\0\7\0\0\0"  # magic 1, version 7
    path = tmp_path / "s.bin"
    path.write_bytes(bytes(head) + np.array([1, EOT], "<u2").tobytes())
    with pytest.raises(TokenFileError, match=r"not an llm.c shard \(magic 1, not 20240520\)"):
        _members(path)


def test_more_ids_than_the_megatron_index_says_are_refused(tmp_path: Path) -> None:
    """F10: 5 ids beside an index of 4 were read as its 2 documents."""
    path = _ids(tmp_path / "train.bin", [1, 2, 3, 4, 5])
    (tmp_path / "train.idx").write_bytes(megatron_index(np.array([2, 4]), np.dtype("<u2")))
    with pytest.raises(TokenFileError, match=r"5 ids, not the 4 of its train\.idx"):
        _members(path)


def test_megatron_document_indices_short_of_the_sequences_are_refused(tmp_path: Path) -> None:
    """F8: document indices [0, 1, 2] of 3 sequences leave the last sequence in no document."""
    path = _ids(tmp_path / "train.bin", [1, 2, 3, 4])
    body = (_HEAD.pack(MEGATRON_MAGIC, 1, 8, 3, 3)
            + np.array([2, 2, 0], "<i4").tobytes() + np.array([0, 4, 8], "<i8").tobytes()
            + np.array([0, 1, 2], "<i8").tobytes())  # fmt: skip
    (tmp_path / "train.idx").write_bytes(body)
    with pytest.raises(TokenFileError, match="document indices do not run from 0 to 3 in order"):
        _members(path)


def test_a_tokens_bin_is_checked_against_its_run_s_count_of_all(tmp_path: Path) -> None:
    """F3: ``tokens.bin`` (a run of no split) holds the documents counted as ``all``."""
    path = _ids(tmp_path / "tokens.bin", [1, EOT, 2, EOT])
    _meta(tmp_path, counts={"documents": {"all": 3}})
    with pytest.raises(TokenFileError, match="2 documents, not the 3 of all its run's meta"):
        _members(path)


def test_an_llmc_shard_longer_than_its_header_says_is_refused(tmp_path: Path) -> None:
    """F6: a shard of more ids than its header announces was read by its header."""
    path = tmp_path / "s.bin"
    path.write_bytes(llmc_header(2) + np.array([1, EOT, 7, 8], "<u2").tobytes())
    with pytest.raises(TokenFileError, match="1032 bytes, not the header and 2 uint16 ids"):
        read_llmc_header(path)


def test_a_datatrove_file_is_ids_whatever_its_first_bytes_look_like(tmp_path: Path) -> None:
    """T8: a ``.ds`` whose ids begin as gzip data was refused as gzip."""
    raw = gzip.compress(b"hello world!" * 3)
    raw += b"\0" * (len(raw) % 2)
    path = tmp_path / "x.ds"
    path.write_bytes(raw)
    np.array([len(raw) // 2], "<u8").tofile(str(path) + ".index")
    assert len(Corpus.open_tokens(path).units) == 1


def test_the_largest_id_of_the_dtype_may_be_the_end_of_text(tmp_path: Path) -> None:
    """F4: eot 65535 is a uint16 id."""
    path = _ids(tmp_path / "train.bin", [1, 65535, 2, 65535])
    assert _members(path, eot=65535) == ["docs 0-2"]


# -- parquet, tars, JSON lines ---------------------------------------------------------------


def test_a_parquet_footer_whose_row_groups_miss_rows_is_damaged(tmp_path: Path) -> None:
    """P3: the file says 3 rows, its one row group holds 2."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["hello world", "second doc"]}), path)
    raw = bytearray(path.read_bytes())
    footer = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    # FileMetaData: field 3 (num_rows, i64) = zigzag 2, then field 4 (row_groups, a list)
    at = raw.find(b"\x16\x04\x19", footer)
    assert at > 0
    raw[at + 1] = 0x06  # zigzag 3
    path.write_bytes(bytes(raw))
    assert pq.read_metadata(path).num_rows == 3
    with pytest.raises(CorpusError, match="its row groups hold 2 rows, not the file's 3"):
        Corpus.open(path)


def test_a_parquet_text_column_beside_a_struct_s_text_field_opens(tmp_path: Path) -> None:
    """P4: ``meta.text`` (a leaf named ``text`` in a struct) is not the ``text`` column."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": ["hello", "world"], "meta": [{"text": "x"}, {"text": "y"}]}),
                   path)  # fmt: skip
    corpus = Corpus.open(path)
    assert len(corpus.units) == 1
    with Loader(corpus, workers=0, shuffle=False).iter() as it:
        assert [d.text for d in it] == ["hello", "world"]


def test_an_empty_first_parquet_row_group_lies_after_the_magic(tmp_path: Path) -> None:
    """P2: a first row group of no row is placed at byte 4 (after ``PAR1``), not 0."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "a.parquet"
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())])) as writer:
        writer.write_table(pa.table({"text": pa.array([], pa.string())}))
        writer.write_table(pa.table({"text": ["hello"]}))
    empty, full = Corpus.open(path).units
    assert (empty.offset, empty.size) == (4, 0)
    assert full.size > 0


def test_a_damaged_block_far_after_a_tar_s_end_is_said(tmp_path: Path) -> None:
    """O3: only the first 512 bytes after the end-of-archive blocks were checked."""
    import lzma

    path = outer_tar(tmp_path / "t.tar", [("0001.xz", lzma.compress(b"doc one\n"))])
    with path.open("ab") as f:
        f.write(b"\0" * 2048 + b"garbage" + b"\0" * 505)
    with pytest.raises(CorpusError, match=r"tar header at byte 1024 after member 0001\.xz is dam"):
        Corpus.open(path, on_error="raise")


def test_a_json_lines_chunk_ending_on_a_line_s_end_is_cut_there(tmp_path: Path) -> None:
    """J1: a line ending exactly at byte ``chunk`` ends the first unit there."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text":"aaaa"}\n{"text":"bbbb"}\n{"text":"cc"}\n')  # 16, 16, 14 bytes
    fd = os.open(path, os.O_RDONLY)
    try:
        units = jsonl_units(LocalFile(fd, os.fstat(fd).st_size), str(path), "s", "a.jsonl",
                            "text", chunk=16)  # fmt: skip
    finally:
        os.close(fd)
    assert [(u.member, u.offset, u.size) for u in units] == [
        ("a.jsonl", 0, 16), ("a.jsonl@16", 16, 16), ("a.jsonl@32", 32, 14)]  # fmt: skip


# -- the error policy's counts -----------------------------------------------------------


def _lines(folder: Path, lines: dict[str, int], bad: set[str], replaced: str = "") -> Corpus:
    """One JSON lines file per key, ``lines[key]`` lines; a ``bad`` line is no JSON, the
    texts of the files in ``replaced`` hold bytes that are not UTF-8."""
    folder.mkdir()
    for key, n in lines.items():
        tail = b" \xff\xfe" if key in replaced else b""
        good = [b'{"text": "' + f"{key}{i}".encode() + tail + b'"}' for i in range(n)]
        rows = [b"{not json" if f"{key}{i}" in bad else good[i] for i in range(n)]
        (folder / f"{key}.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    corpus = Corpus.open(folder, on_error="skip")
    return corpus.with_counts(Counts(tuple(lines[Path(u.path).stem] for u in corpus.units)))


def test_documents_replaced_on_a_pass_repeating_the_share_are_counted_once(
    tmp_path: Path,
) -> None:
    """E1: rank 1 reads units again to pad its share; their replaced documents counted twice."""
    corpus = _lines(tmp_path / "c", {"a": 4, "b": 4, "c": 3, "d": 4},
                    {"a1", "a3", "b0", "c0", "d0", "d1"}, replaced="bc")  # fmt: skip
    with Loader(corpus, rank=1, world_size=2, even="pad", shuffle=True, shuffle_buffer=2,
                seed=21, workers=0, on_error="skip", epochs=1,
                decode_errors="replace").iter() as it:  # fmt: skip
        texts = [d.text for d in it]
        stats = it.stats
    assert (stats.documents, stats.skipped_documents, stats.repeated_documents) == (8, 3, 3)
    assert sum("\ufffd" in t for t in texts) == 6
    assert stats.replaced_documents == 5


def test_skips_of_a_resharded_rank_s_second_lap_are_counted_once(tmp_path: Path) -> None:
    """E5: a new rank's rest going round again counted its units' skips again."""
    corpus = _lines(tmp_path / "c", {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6}, {"a1", "c3"})

    def opts(rank: int) -> dict[str, object]:
        return dict(rank=rank, world_size=2, even="pad", shuffle=True, shuffle_buffer=4, seed=5,
                    workers=0, on_error="skip")  # fmt: skip

    states = []
    for rank in range(2):
        with Loader(corpus, **opts(rank)).iter() as it:  # type: ignore[arg-type]
            next(it)
            next(it)
            states.append(json.loads(json.dumps(it.state_dict())))
    said = []
    for rank, state in enumerate(reshard(states, 2, even="pad")):
        with Loader(corpus, **opts(rank)).iter(state=state) as it:  # type: ignore[arg-type]
            n = sum(1 for _ in it)
            said.append((n, it.stats.skipped_documents, it.stats.repeated_documents))
    assert said == [(12, 1, 1), (12, 1, 1)]


def test_the_stats_name_the_first_ten_thousand_skips(tmp_path: Path) -> None:
    """E3: ``stats.skipped`` keeps the first 10,000 names (the mutant kept 3)."""
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok"}\n' + "{not json\n" * 10_005)
    with Loader(path, workers=0, seed=0, on_error="skip", epochs=1).iter() as it:
        assert sum(1 for _ in it) == 1
        stats = it.stats
    assert stats.skipped_documents == 10_005
    assert len(stats.skipped) == 10_000
    assert ": line 2: " in stats.skipped[0] and ": line 10001: " in stats.skipped[-1]


# -- remote, redaction, shapes, masks ------------------------------------------------------


class _GoneMeta(RangeServer):
    """A ``RangeServer`` whose ``meta.json`` answers 410 Gone."""

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        if h.path.split("?", 1)[0].endswith("/meta.json"):
            self._empty(h, 410)
            return
        super()._answer(h, head)


def test_a_companion_file_gone_410_is_absent(tmp_path: Path) -> None:
    """R7: a ``meta.json`` answering 410 is no ``meta.json``, not a failed read."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    from openwebtext.source import retry

    gone = FileNotFoundError("gone")
    gone.status = 410  # type: ignore[attr-defined]
    assert retry.classify(gone) == retry.ABSENT
    root = tmp_path / "served"
    root.mkdir()
    _ids(root / "train.bin", [1, EOT, 2, EOT])
    (root / "train.idx").write_bytes(megatron_index(np.array([2, 4]), np.dtype("<u2")))
    with _GoneMeta(root) as server:
        assert _members(f"{server.url}/train.bin") == ["docs 0-2"]


def test_a_signature_is_redacted() -> None:
    """D1: ``signature=...`` was left in what is said."""
    from openwebtext.source.redaction import redact

    assert redact("signing: signature=abcdef0123 done") == "signing: signature=*** done"


def test_a_state_of_another_batch_size_names_batch_size(tmp_path: Path) -> None:
    """SH3: the first step's seq_len is as now, its batch size is not: ``batch_size`` differs."""
    from openwebtext import StateError

    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"text": f"d {i} " + "w " * (i % 7)}) + "\n"
                            for i in range(40)))  # fmt: skip
    loader = Loader(path, workers=0, seed=0, tokenizer="bytes", epochs=None)
    with loader.batches(schedule=[(0, 32, 2), (2, 64, 2), (4, 16, 4)]) as batches:
        next(iter(batches))
        state = batches.state_dict()
    with pytest.raises(StateError) as caught, loader.batches(32, 3, state=state) as batches:
        next(iter(batches))
    assert caught.value.field == "batch_size"


def test_a_document_mask_refuses_bool_segment_ids() -> None:
    """K3: bool segment ids were taken as ids 0 and 1."""
    torch = pytest.importorskip("torch")
    from openwebtext.torch.masks import document_mask

    with pytest.raises(ValueError, match=r"integer dtype, not torch\.bool"):
        document_mask(torch.tensor([[True, True, False]]))
