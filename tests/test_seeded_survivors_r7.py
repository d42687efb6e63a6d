"""Behaviour that seeded bugs of round 7 (session 30; docs/testing.md) changed with no test
failing: each test here pins one, and was run against its mutant (named M-number)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Schedule, StateError
from openwebtext.index.jsonl import jsonl_units
from openwebtext.index.outer import LocalFile
from openwebtext.tokenfiles import TokenFileError, read_megatron_index

EOT = 50256


def _tokens(path: Path, documents: list[list[int]]) -> Path:
    ids = [np.array([*d, EOT], dtype="<u2") for d in documents]
    np.concatenate(ids).tofile(path)
    return path


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"text": f"d {i} " + "w " * (i % 7)}) + "\n"
                            for i in range(n)))  # fmt: skip
    return path


def test_resharded_loader_states_go_to_their_rank_and_worker(tmp_path: Path) -> None:
    """M07: new rank r's worker w reads share r * N + w; the states were dealt round robin."""
    pytest.importorskip("torch")
    from openwebtext.torch import reshard_loader_states

    corpus = _jsonl(tmp_path / "r.jsonl", 40)
    states = []
    for rank in range(2):
        with Loader(corpus, workers=0, seed=0, rank=rank, world_size=2).iter() as it:
            next(it)
            states.append({"dataset_state": it.state_dict()})
    new = reshard_loader_states(states, world_size=2, num_workers=2)
    shares = [[(s["config"]["rank"], s["config"]["world_size"]) for s in rank] for rank in new]
    assert shares == [[(0, 4), (1, 4)], [(2, 4), (3, 4)]]


def test_documents_outside_the_split_are_not_counted_as_skipped(tmp_path: Path) -> None:
    """M48: a document of ids outside the vocabulary in the other split is never read here."""
    path = _tokens(tmp_path / "split.bin", [[i + 1, 50300 if i % 3 == 0 else 7, 9]
                                             for i in range(30)])  # fmt: skip
    said = {}
    for split in ("train", "val"):
        with Loader(Corpus.open_tokens(path), workers=0, tokenizer="gpt2", shuffle=False,
                    split=split, val_fraction=0.3, on_error="skip").iter() as it:  # fmt: skip
            kept = sum(1 for _ in it)
            said[split] = (kept, it.stats.skipped_documents)
    assert said["train"][1] + said["val"][1] == 10  # (every third of 30)
    assert sum(k for k, _ in said.values()) + 10 == 30


def test_two_token_files_name_their_documents_apart(tmp_path: Path) -> None:
    """M45 (two files named alike) and M53 (a subset is the name before its first dot)."""
    a = _tokens(tmp_path / "a.x.bin", [[1, 2], [3]])
    b = _tokens(tmp_path / "b.x.bin", [[4], [5, 6]])
    corpus = Corpus.open_tokens([a, b])
    assert [u.member for u in corpus.units] == ["a.x.bin docs 0-2", "b.x.bin docs 0-2"]
    assert sorted({u.subset for u in corpus.units}) == ["a", "b"]


def test_a_megatron_index_of_no_document_index_is_said_so(tmp_path: Path) -> None:
    """M51; its message said "34 bytes, not the 34 of 0 sequences and 0 document indices"."""
    path = tmp_path / "m.idx"
    path.write_bytes(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, 0, 0))
    with pytest.raises(TokenFileError, match="0 document indices: a megatron index holds one"):
        read_megatron_index(path)


def test_a_warmup_places_its_steps_by_floor() -> None:
    """M12: batches not divisible by the stages' gaps."""
    steps = Schedule.warmup(64, 1024, tokens=4096, batches=10, stages=4).steps
    assert [b for b, _, _ in steps] == [0, 3, 6, 10]


def test_a_state_of_other_sizes_names_seq_len_first(tmp_path: Path) -> None:
    """M15: both sizes differ; the field named is ``seq_len``."""
    loader = Loader(_jsonl(tmp_path / "s.jsonl", 20), workers=0, seed=0, tokenizer="bytes")
    with loader.batches(8, 2) as batches:
        next(batches)
        state = batches.state_dict()
    with pytest.raises(StateError) as caught, loader.batches(16, 4, state=state) as batches:
        next(batches)
    assert caught.value.field == "seq_len"


def test_a_plain_json_lines_file_is_cut_at_the_line_ending_at_the_chunk(tmp_path: Path) -> None:
    """M40: a newline at byte ``chunk - 1`` ends the first unit there."""
    path = tmp_path / "x.jsonl"
    path.write_text('{"text":"aaa"}\n{"text":"bbb"}\n{"text":"ccc"}\n')  # 15 bytes a line
    fd = os.open(path, os.O_RDONLY)
    try:
        units = jsonl_units(LocalFile(fd, path.stat().st_size), str(path), "s", "x.jsonl", "text",
                            chunk=15)  # fmt: skip
    finally:
        os.close(fd)
    assert [(u.offset, u.size) for u in units] == [(0, 15), (15, 15), (30, 15)]


def test_a_parquet_row_group_of_no_row_lies_where_the_one_before_ends(tmp_path: Path) -> None:
    """M41; and M42: a file of 8 to 11 bytes is said to be no parquet file."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from openwebtext.errors import CorpusError

    path = tmp_path / "e.parquet"
    table = pa.table({"text": ["one", "two"]})
    with pq.ParquetWriter(path, table.schema) as writer:
        writer.write_table(table)
        writer.write_table(table.slice(0, 0))
        writer.write_table(table)
    first, empty, _ = Corpus.open(path).units
    assert (empty.offset, empty.size) == (first.offset + first.size, 0)
    short = tmp_path / "short.parquet"
    short.write_bytes(b"PAR1\x00\x00\x00\x00PA")
    with pytest.raises(CorpusError, match="not a parquet file: 10 bytes"):
        Corpus.open(short)


def test_the_feed_s_defaults_are_as_documented() -> None:
    """M02 (FlexAttention's block, 128) and M11 (``to_device``'s depth, 2)."""
    torch = pytest.importorskip("torch")
    from openwebtext.torch import to_device

    class Source:
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([])

        def state_dict(self) -> dict[str, object]:
            return {}

    stage = to_device(Source(), "cpu")
    try:
        assert stage.depth == 2
    finally:
        stage.close()
    pytest.importorskip("torch.nn.attention.flex_attention")
    from openwebtext.torch import document_block_mask

    mask = document_block_mask(torch.tensor([[1, 1, 2, 0, 0, 0]]))
    assert mask.BLOCK_SIZE == (128, 128)
