"""Behaviour that seeded bugs of round 18 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID). Round 18 (session 40,
65 mutants, 15 survivors, 13 observable) took a warm-up's lengths (``stream/shapes.py``), a
mixture's seeded draws (``mixing.py``), the unit order and slices (``plan.py``), the defaults
and closing lines of ``owt stream`` (``cli/streamchecks.py``, ``cli/summary.py``), the checks
of a counts file (``index/countsfile.py``), the llm.c shards (``prepare/convert.py``), best
fit's pad id (``stream/batches.py``) and the counts of a block read under a skip
(``stream/blocks.py``)."""

from __future__ import annotations

import collections
import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, Schedule, reshard
from openwebtext.synth import write_corpus
from support import Owt, cut_member, outer_tar, xz_member


def _member_name(m: int) -> str:
    return f"openwebtext/urlsf_subset00-{m + 1}_data.xz"


# -- stream/shapes.py ----------------------------------------------------------------------------


def test_a_warm_up_s_lengths_round_to_the_nearest_multiple() -> None:
    """H3: a stage's length was cut down to a multiple of ``multiple`` (``int``), not rounded
    to the nearest: 700 became 640, not 704."""
    s = Schedule.warmup(100, 1000, tokens=8000, batches=300, stages=4, multiple=64)
    assert [seq_len for _, seq_len, _ in s.steps] == [100, 384, 704, 1000]


# -- mixing.py -----------------------------------------------------------------------------------


def test_random_sampling_draws_each_rank_s_own_parts(tmp_path: Path) -> None:
    """M5: the seeded draw of a part left the rank out: under ``sampling="random"`` ranks 0
    and 1 of two drew the same sequence of parts."""
    for name, seed in (("a", 1), ("b", 2)):
        write_corpus(tmp_path / name, subsets=1, members=2, docs=20, seed=seed, workers=1)
    mixture = Mixture({p: str(tmp_path / p) for p in "ab"}, weights={"a": 0.5, "b": 0.5},
                      sampling="random")  # fmt: skip

    def parts(rank: int) -> str:
        loader = Loader(mixture, workers=0, seed=0, rank=rank, world_size=2, even=None, take=24)
        with loader.iter() as docs:
            return "".join(doc.source for doc in docs)

    assert parts(0) != parts(1)


# -- plan.py -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("positions", "per_shard", "count"), [(5, 2, 3), (7, 3, 3), (4, 2, 2)])
def test_shard_count_covers_every_position(positions: int, per_shard: int, count: int) -> None:
    """P2: ``shard_count`` divided rounding down: 5 positions in slices of at most 2 made 2
    slices (of 2 and 3), not 3."""
    from openwebtext.plan import shard_count, shard_range

    assert shard_count(positions, per_shard) == count
    ranges = [shard_range(positions, i, count) for i in range(count)]
    assert ranges[0][0] == 0 and ranges[-1][1] == positions
    assert all(hi - lo <= per_shard for lo, hi in ranges)


def test_a_two_unit_corpus_s_order_changes_with_the_seed(tmp_path: Path) -> None:
    """P7: a permutation of two was never shuffled: a corpus of two members read one member
    first whatever the seed."""
    write_corpus(tmp_path, subsets=1, members=2, docs=5, workers=1)
    corpus = Corpus.open(tmp_path)
    assert len(corpus.units) == 2
    first = set()
    for seed in range(12):
        with Loader(corpus, seed=seed, shuffle_buffer=1, workers=0).iter() as docs:
            first.add(next(docs).member)
    assert len(first) == 2


# -- cli/streamchecks.py, cli/summary.py ---------------------------------------------------------


def _packed(ran: Any) -> str:
    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stderr.splitlines() if line.startswith("packed")]
    return line


def test_pack_without_seq_len_packs_rows_of_1025_ids(small_corpus: Path, owt: Owt) -> None:
    """C1: ``--pack`` without ``--seq-len`` packed rows of another default than the documented
    1024 (+1 for the targets): its closing line said "8 x 513 ids"."""
    line = _packed(owt("stream", str(small_corpus), "--tokenizer", "bytes", "-j", "0", "-q",
                       "--pack", "concat"))  # fmt: skip
    assert re.search(r"batch(es)? of 8 x 1025 ids", line), line


def test_the_padding_share_is_of_the_ids_handed_out(tmp_path: Path, owt: Owt) -> None:
    """U4: the packing line's padding share was of ``seq_len`` ids a row, not ``seq_len + 1``:
    50 documents of 6 bytes in rows of 4 ids, 2 a batch, said 50 padding ids of 400 as
    16.67%, not 12.50%."""
    docs = {f"{k:05d}-abc.txt": b"abcdef" for k in range(50)}
    outer_tar(tmp_path / "urlsf_subset00.tar", [(_member_name(0), xz_member(docs))])
    line = _packed(owt("stream", str(tmp_path), "--tokenizer", "bytes", "-j", "0", "-q",
                       "--pack", "bestfit", "--seq-len", "3", "--batch-size", "2"))  # fmt: skip
    assert "into 50 batches of 2 x 4 ids: 50 padding ids (12.50%)" in line, line


def test_a_replaced_document_is_said_with_no_skip(tmp_path: Path, owt: Owt) -> None:
    """U1: the closing line said what was replaced only when something was skipped too:
    ``--decode-errors replace`` over a document of invalid UTF-8 (no skip) said nothing of
    it."""
    docs = {f"0000{k}-abc.txt": f"document {k}\n".encode() for k in range(4)}
    docs["00009-bad.txt"] = b"bad \xff byte\n"
    outer_tar(tmp_path / "urlsf_subset00.tar", [(_member_name(0), xz_member(docs))])
    ran = owt("stream", str(tmp_path), "--decode-errors", "replace", "-j", "0", "-q")
    assert ran.returncode == 0, ran.stderr
    assert "replaced invalid UTF-8 in 1 document" in ran.stderr


def test_a_resumed_mixture_counts_each_part_from_its_own_counters(tmp_path: Path) -> None:
    """U3: ``at_state`` took a mixture state's parts' counters in alphabetical order, not the
    mixture's: with parts "web" then "books", each was counted by the other's counters."""
    from openwebtext.cli.summary import at_state
    from openwebtext.stream import BatchesState

    for name, seed in (("web", 1), ("books", 2)):
        write_corpus(tmp_path / name, subsets=1, members=2, docs=30, seed=seed, workers=1)
    mixture = Mixture({p: str(tmp_path / p) for p in ("web", "books")},
                      weights={"web": 0.8, "books": 0.2})  # fmt: skip
    with Loader(mixture, workers=0, seed=0, tokenizer="bytes").batches(256, 8) as batches:
        for _ in range(40):
            next(batches)
        state, stats = batches.state_dict(), batches.stats
    parsed = BatchesState.from_json(state)
    said = at_state(stats, parsed.documents)
    counted = {p: parsed.documents.parts[p].counters.documents for p in ("web", "books")}
    assert counted["web"] != counted["books"]
    assert {p: said.parts[p].documents for p in ("web", "books")} == counted


# -- index/countsfile.py -------------------------------------------------------------------------


def _one_past(body: dict[str, Any]) -> None:
    body["failed"] = [body["units"]]  # (the unit one past the corpus's last)


def _one_unit_fewer(body: dict[str, Any]) -> None:
    body["units"] -= 1
    body["documents"] = body["documents"][:-1]
    body["total"] = sum(body["documents"])
    body["val"] = {k: v[:-1] for k, v in body["val"].items()}


@pytest.mark.parametrize("edit", [_one_past, _one_unit_fewer], ids=["K1", "K4"])
def test_an_edited_counts_file_is_damaged_and_counted_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, edit: Any
) -> None:
    """K1, K4: a counts file whose ``failed`` names the unit one past the corpus's last
    (K1: ``u > units``), or that counts one unit fewer than the corpus has, its fields cut to
    match (K4: the units left unchecked), raised a raw IndexError (at ``Corpus.open``, or
    sharding under ``world_size=2``), not the library's "damaged ... ignored": a warning, and
    the documents counted again."""
    from openwebtext.stream import count_documents

    write_corpus(tmp_path, subsets=1, members=3, docs=5, workers=1)
    corpus = Corpus.open(tmp_path)
    path = corpus.save_counts(count_documents(corpus, workers=0))
    body = json.loads(path.read_text())
    edit(body)
    path.write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        corpus = Corpus.open(tmp_path)
        assert corpus.counts is None
        names = []
        for r in range(2):
            with Loader(corpus, world_size=2, rank=r, seed=0, workers=0).iter() as docs:
                names += [doc.name for doc in docs]
    assert "is damaged" in caplog.text and "ignored" in caplog.text
    assert len(names) == len(set(names)) >= 14  # (evened out: one document may be dropped)


# -- prepare/convert.py --------------------------------------------------------------------------


def test_llmc_shards_of_one_document_each_hold_train_bin_once(tmp_path: Path) -> None:
    """V1: a shard's first id was taken from the end of the document before it only past
    the second document: with ``shard_tokens=1`` (a document a shard) the second shard began
    at id 0 again, the first document written twice."""
    from openwebtext.prepare import PrepareOptions, prepare, write_format

    write_corpus(tmp_path / "c", subsets=1, members=2, docs=4, workers=1)
    out = tmp_path / "out"
    prepare(Corpus.open(tmp_path / "c"), out,
            PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.2))  # fmt: skip
    write_format(out, "llmc", shard_tokens=1)
    train = np.fromfile(out / "train.bin", dtype=np.uint16)
    shards = sorted(out.glob("train_*.bin"))
    assert len(shards) > 2
    ids = np.concatenate([np.fromfile(s, dtype=np.uint16)[512:] for s in shards])
    assert np.array_equal(ids, train)


# -- stream/batches.py ---------------------------------------------------------------------------


def test_best_fit_takes_pad_id_0_in_an_unsigned_dtype(small_corpus: Path) -> None:
    """Q2: the pad id's range check left out its low end: ``pad_id=0`` with ``dtype=uint16``
    (0 in 0..65535) was refused for best fit."""
    loader = Loader(small_corpus, workers=0, tokenizer="bytes")
    with loader.batches(64, 2, packing="bestfit", pad_id=0, dtype=np.uint16) as batches:
        assert next(batches).dtype == np.uint16


# -- stream/blocks.py ----------------------------------------------------------------------------


def _cut_corpus(folder: Path) -> Path:
    """8 members of 6 documents; member 3 cut in half (its documents before the cut read)."""
    members = []
    for m in range(8):
        docs = {f"{m}{k:04d}-x.txt": f"document {m}.{k} ".encode() * 200 for k in range(6)}
        members.append((_member_name(m), cut_member(docs) if m == 3 else xz_member(docs)))
    outer_tar(folder / "urlsf_subset00.tar", members)
    return folder


@pytest.mark.parametrize("stop", range(1, 7))
def test_a_reshard_after_a_skip_in_a_block_hands_out_the_rest_once(
    tmp_path: Path, stop: int
) -> None:
    """L4: a block's read count took every error as a document left out, a cut member's
    too: a run of one rank over a corpus with a member cut short (``on_error="skip"``,
    ``shuffle_buffer=8``), stopped after ``stop`` documents and resharded onto two ranks,
    lost a document and handed out another twice."""
    corpus = Corpus.open(_cut_corpus(tmp_path))
    opts: dict[str, Any] = {"workers": 0, "seed": 0, "shuffle_buffer": 8, "on_error": "skip"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Loader(corpus, **opts).iter() as it:
            every = [doc.name for doc in it]
        with Loader(corpus, **opts).iter() as it:
            first = [next(it).name for _ in range(stop)]
            state = it.state_dict()
        rest = []
        for r, s in enumerate(reshard([state], 2, even=None)):
            with Loader(corpus, **opts, rank=r, world_size=2, even=None).iter(state=s) as it:
                rest += [doc.name for doc in it]
    assert collections.Counter(first + rest) == collections.Counter(every)
