"""Token ids made in the workers, packed batches, their exact resume, and ``owt tokenize``."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Loader, StateError, TokenDocument
from openwebtext.errors import CorruptDocument, CorruptMember
from openwebtext.loader import Batches
from openwebtext.plan import in_validation
from openwebtext.tokenizer import load_tokenizer
from support import Owt, damage, inner_tar, member_offset, outer_tar, sample_docs

BYTES_EOT = 256


def stream_ids(loader: Loader) -> list[int]:
    """Every id of the loader's token stream, in order (the reference for packing)."""
    ids: list[int] = []
    for doc in loader:
        ids += doc.tokens.tolist()  # type: ignore[attr-defined]
    return ids


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_token_documents_follow_the_text_stream(small_corpus: Path, workers: int) -> None:
    text = list(Loader(small_corpus, workers=2, seed=5, shuffle_buffer=50))
    loader = Loader(small_corpus, workers=workers, seed=5, shuffle_buffer=50, tokenizer="bytes")
    tokens = list(loader)
    assert [type(d) for d in tokens] == [TokenDocument] * 120
    assert [d.name for d in tokens] == [d.name for d in text]
    for t, d in zip(tokens, text, strict=True):
        assert isinstance(t, TokenDocument)
        assert t.tokens.dtype == np.uint16
        assert t.tokens.tolist() == [*d.text.encode(), BYTES_EOT]
        assert (t.subset, t.member, t.member_index, t.document_index) == (
            d.subset,
            d.member,
            d.member_index,
            d.document_index,
        )


def test_gpt2_ids_are_made_in_the_workers(small_corpus: Path) -> None:
    gpt2 = load_tokenizer("gpt2")
    text = list(Loader(small_corpus, workers=2, seed=1, take=12))
    tokens = list(Loader(small_corpus, workers=2, seed=1, take=12, tokenizer="gpt2"))
    assert len(tokens) == 12
    for t, d in zip(tokens, text, strict=True):
        assert t.tokens.tolist() == [*gpt2.encode(d.text), 50256]  # type: ignore[attr-defined]


def test_stats_count_tokens(small_corpus: Path) -> None:
    """(Their resume is checked with every other counter by ``tests/resumable.py``.)"""
    loader = Loader(small_corpus, workers=2, seed=2, shuffle_buffer=30, tokenizer="bytes")
    with loader.iter() as it:
        first = [next(it) for _ in range(45)]
        assert it.stats.tokens == sum(len(d.tokens) for d in first)
        assert it.state_dict()["counters"].get("tokens", 0) == it.stats.tokens
        rest = list(it)
        assert it.stats.tokens == len(stream_ids(loader))
    assert len(first) + len(rest) == it.stats.documents == 120


def test_text_state_does_not_resume_a_token_stream(small_corpus: Path) -> None:
    with Loader(small_corpus, workers=0).iter() as it:
        next(it)
        state = it.state_dict()
    with pytest.raises(StateError, match="tokenizer"):
        Loader(small_corpus, workers=0, tokenizer="bytes").iter(state=state)


@pytest.mark.parametrize(("seq_len", "batch_size"), [(7, 3), (64, 2), (1000, 1)])
def test_batches_cover_every_id_once_in_order(
    small_corpus: Path, seq_len: int, batch_size: int
) -> None:
    loader = Loader(small_corpus, workers=2, seed=3, shuffle_buffer=40, tokenizer="bytes")
    ids = np.array(stream_ids(loader))
    with loader.batches(seq_len, batch_size) as batches:
        got = list(batches)
    step = seq_len * batch_size
    assert len(got) == (len(ids) - 1) // step  # what is left over at the end is dropped
    for b, batch in enumerate(got):
        assert batch.shape == (batch_size, seq_len + 1)
        assert batch.dtype == np.int64
        for r in range(batch_size):
            start = b * step + r * seq_len
            assert batch[r].tolist() == ids[start : start + seq_len + 1].tolist()
    # Rows overlap by one id: the targets (columns 1..) are every id after the first, once.
    targets = np.concatenate([batch[:, 1:].ravel() for batch in got])
    assert targets.tolist() == ids[1 : 1 + len(targets)].tolist()


def test_batches_refuse_what_they_cannot_do(small_corpus: Path) -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        Loader(small_corpus).batches(8, 2)
    loader = Loader(small_corpus, workers=0, tokenizer="bytes")
    with pytest.raises(ValueError, match="seq_len"):
        loader.batches(0, 2)
    with loader.batches(8, 2) as batches:
        next(batches)
        state = batches.state_dict()
    with pytest.raises(StateError, match="seq_len=8, batch_size=2"):
        loader.batches(16, 2, state=state)
    with pytest.raises(StateError, match="format"):
        loader.batches(8, 2, state=state["documents"])
    assert isinstance(loader.batches(8, 2), Batches)


def test_invalid_utf8_under_each_policy(tmp_path: Path) -> None:
    docs = sample_docs("u", 5)
    docs["u-bad.txt"] = b"caf\xe9 latin-1"
    outer = outer_tar(tmp_path / "u.tar", [("u_data.xz", lzma.compress(inner_tar(docs)))])
    with pytest.raises(CorruptDocument, match=r"u\.tar\[u_data\.xz\].*invalid UTF-8.*u-bad\.txt"):
        list(Loader(outer, workers=1, tokenizer="bytes"))
    skipped = Loader(outer, workers=1, tokenizer="bytes", on_error="skip")
    with skipped.iter() as it:
        got = {d.name: d.tokens.tolist() for d in it}
        assert it.stats.skipped_documents == 1
    assert "u-bad.txt" not in got and len(got) == 5
    with Loader(outer, workers=1, tokenizer="bytes", decode_errors="replace").iter() as it:
        got = {d.name: d.tokens.tolist() for d in it}
        assert it.stats.replaced_documents == 1
    assert got["u-bad.txt"] == [*"caf\ufffd latin-1".encode(), BYTES_EOT]


def test_corrupt_member_names_itself_in_token_mode(tmp_path: Path) -> None:
    docs = sample_docs("c", 3)
    outer = outer_tar(tmp_path / "c.tar", [("c_data.xz", lzma.compress(inner_tar(docs)))])
    offset, size = member_offset(outer, "c_data.xz")
    damage(outer, offset + size // 2, b"\x00\xff" * 8)
    with pytest.raises(CorruptMember, match=r"c\.tar\[c_data\.xz\]"):
        list(Loader(outer, workers=2, tokenizer="bytes"))


def test_owt_tokenize_writes_nanogpt_bins(owt: Owt, small_corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "bins"
    result = owt("tokenize", str(small_corpus), "--out", str(out),
                 "--tokenizer", "bytes", "-j", "2", "--val-fraction", "0.2", "-q")  # fmt: skip
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    train = np.memmap(out / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(out / "val.bin", dtype=np.uint16, mode="r")
    assert meta["config"]["dtype"] == "uint16" and meta["config"]["eot"] == BYTES_EOT
    assert meta["counts"]["tokens"] == {"train": len(train), "val": len(val)}
    docs = {d.name: d.text for d in Loader(small_corpus, workers=0)}
    held = {n for n in docs if in_validation(n, 0.2, 2357)}
    assert 0 < len(held) < len(docs)
    assert meta["counts"]["documents"] == {"train": len(docs) - len(held), "val": len(held)}
    assert int((val == BYTES_EOT).sum()) == len(held)
    assert len(val) == sum(len(docs[n].encode()) + 1 for n in held)
    assert len(train) == sum(len(t.encode()) + 1 for n, t in docs.items() if n not in held)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_an_endless_run_whose_documents_hold_no_id_is_an_error_not_a_hang(
    packing: str, tmp_path: Path
) -> None:
    """A token file's documents may hold no id (a Megatron index of sequences of size 0): an
    endless run's packer would wait for ids forever (concat), or hand out padding only."""
    from openwebtext import Corpus, CorpusError
    from openwebtext.tokenfiles import megatron_index

    (tmp_path / "train.bin").write_bytes(b"")
    (tmp_path / "train.idx").write_bytes(megatron_index(np.array([0, 0]), np.dtype("<u2")))
    loader = Loader(Corpus.open_tokens(tmp_path / "train.bin"), tokenizer="gpt2", workers=0,
                    epochs=None)  # fmt: skip
    with (loader.batches(8, 1, packing=packing) as it,
          pytest.raises(CorpusError, match="epoch 0 yielded documents of no id: an endless")):
        next(iter(it))
