"""The packers read runs of documents (issue 37): whatever the runs' sizes, the batches are those
of packing the documents one at a time (``packing_oracle``), and a state taken between batches
names the document a document-at-a-time packer would have named."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext.stream import BestFitBatches, TokenRun, WindowAhead, packing
from openwebtext.stream.batches import Batches
from openwebtext.stream.counters import Counters, PackingCounts
from openwebtext.stream.fitting import best_fit, best_fit_rows
from openwebtext.stream.schema import DocumentState, StreamConfig
from openwebtext.stream.state import Mark, Stats
from packing_oracle import best_fit_batches, best_fit_lists, concat_batches

PAD = 7


class Vocabulary:
    n_vocab = 1 << 16


#: The config of the stand-in's states (a state is the index of the next document).
CONFIG = StreamConfig(
    corpus="0" * 16, units=1, shuffle=False, seed=0, shuffle_buffer=0, rank=0, world_size=1,
    even=None, split="all", val_fraction=0.5, val_seed=0, max_document_bytes=1,
    decode_errors="strict",
)


def mark_at(document: int, lengths: list[int] | None = None) -> Mark:
    """The mark before ``document`` (its index in the one block of epoch 0); with the ids of
    every document (``lengths``) its state counts those before it, as a stream's does (concat's
    offset adds to them)."""
    counts = lengths or []
    return Mark(0, 0, 0, 0, document, 0, None, counts, counts, Counters(), 0, config=CONFIG)


class Runs:
    """A ``DocumentSource`` over ``documents``, handed out in runs of the sizes ``cuts``
    draws; its state is the index of the next document."""

    def __init__(self, documents: list[np.ndarray[Any, Any]], cuts: list[int]) -> None:
        self.documents, self.cuts, self.at = documents, cuts, 0
        self.closed = False

    def next_run(self, in_order: bool = False) -> TokenRun:
        if self.at >= len(self.documents):
            raise StopIteration
        size = max(1, self.cuts.pop(0) if self.cuts else len(self.documents))
        docs = self.documents[self.at : self.at + size]
        before = self.mark()
        self.at += len(docs)
        # The ids as a block's units hold them: not in the order the documents go out.
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        laid = list(range(len(docs)))
        if not in_order:
            laid.sort(key=lambda j: (j * 7) % (len(docs) + 1))
        ids = np.concatenate([np.zeros(3, np.uint16), *[docs[j] for j in laid]])
        starts = np.empty(len(docs), dtype=np.int64)
        starts[laid] = 3 + np.cumsum(lengths[laid]) - lengths[laid]
        return TokenRun(ids, starts, lengths, 0, before, self.mark())

    def mark(self) -> Mark:
        return mark_at(self.at, [len(d) for d in self.documents])

    def state(self, mark: Mark | None = None) -> DocumentState:
        return (mark or self.mark()).state(CONFIG)

    def windows_ahead(self) -> list[WindowAhead]:
        return []

    @property
    def stats(self) -> Stats:
        return Stats()

    def close(self) -> None:
        self.closed = True


lengths = st.lists(st.integers(0, 40), min_size=0, max_size=60)
cuts = st.lists(st.integers(1, 25), max_size=30)


def documents_of(sizes: list[int]) -> list[np.ndarray[Any, Any]]:
    """Documents of ``sizes`` ids, each id naming its document and place (all distinct)."""
    at = np.cumsum([0, *sizes]).tolist()
    return [np.arange(a, b, dtype=np.uint16) for a, b in itertools.pairwise(at)]


@settings(max_examples=300, deadline=None)
@given(
    sizes=lengths, cuts=cuts, seq_len=st.integers(1, 12), batch_size=st.integers(1, 3),
    window=st.integers(1, 9), seed=st.integers(0, 3),
)  # fmt: skip
def test_best_fit_of_runs_is_best_fit_of_documents(
    sizes: list[int], cuts: list[int], seq_len: int, batch_size: int, window: int, seed: int
) -> None:
    documents = documents_of(sizes)
    want = best_fit_batches(documents, seq_len, batch_size, seed=seed, pad_id=PAD, window=window)
    source = Runs(documents, list(cuts))
    packer = BestFitBatches(
        source, seq_len, batch_size, seed=seed, pad_id=PAD, segments=True, window=window
    )
    got = list(packer)
    assert len(got) == len(want)
    for batch, (tokens, segments, positions) in zip(got, want, strict=True):
        assert batch.tokens.dtype == np.int64 and batch.segment_ids.dtype == np.int32
        assert (batch.tokens == tokens).all()
        assert (batch.segment_ids == segments).all()
        assert (batch.positions == positions).all()
    assert source.closed


@settings(max_examples=300, deadline=None)
@given(sizes=lengths, cuts=cuts, seq_len=st.integers(1, 12), batch_size=st.integers(1, 3))
def test_concat_of_runs_is_concat_of_documents(
    sizes: list[int], cuts: list[int], seq_len: int, batch_size: int
) -> None:
    documents = documents_of(sizes)
    want = concat_batches(documents, seq_len, batch_size)
    source = Runs(documents, list(cuts))
    packer = Batches(source, Vocabulary(), seq_len, batch_size, segments=True)  # type: ignore[arg-type]
    got = []
    for batch in packer:
        got.append(batch)
        # The state names the document the next batch starts in, and where in it.
        state = packer.state_dict()
        start = len(got) * seq_len * batch_size
        document, offset = state["documents"]["position"]["in_block"], state["offset"]
        assert sum(sizes[:document]) + offset == start
        assert offset < sizes[document] if document < len(sizes) else offset == 0
    assert len(got) == len(want)
    for batch, (tokens, segments, positions) in zip(got, want, strict=True):
        assert (batch.tokens == tokens).all()
        assert (batch.segment_ids == segments).all()
        assert (batch.positions == positions).all()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 30), max_size=80), st.integers(1, 30))
def test_best_fit_rows_is_the_bisect_over_lists(sizes: list[int], capacity: int) -> None:
    sizes = [min(n, capacity) for n in sizes]
    assert best_fit(sizes, capacity) == best_fit_lists(sizes, capacity)
    row_of, order = best_fit_rows(np.asarray(sizes, dtype=np.int64), capacity)
    assert sorted(order.tolist()) == list(range(len(sizes)))
    assert all(row_of.tolist().count(r) for r in set(row_of.tolist()))


def test_a_run_laid_out_of_order_gives_its_documents_end_to_end() -> None:
    documents = documents_of([3, 0, 5, 2])
    run = Runs(documents, [4]).next_run()
    assert run.starts.tolist() != [3, 6, 6, 11]  # not in order
    ids, ends = run.end_to_end()
    assert ids.tolist() == list(range(10)) and ends.tolist() == [3, 3, 8, 10]
    ordered = Runs(documents, [4]).next_run(in_order=True)
    assert ordered.end_to_end()[0].tolist() == list(range(10))


@pytest.mark.parametrize("cut", [1, 3, 100])
def test_a_best_fit_state_between_batches_resumes_at_its_window(cut: int) -> None:
    """The state's document is the first of the window its next row comes from: resuming
    there with the window's number and rows handed out gives the same batches."""
    documents = documents_of([(k * 7919) % 37 for k in range(90)])
    options: dict[str, Any] = {"seed": 1, "pad_id": PAD, "segments": True, "window": 8}
    whole = list(BestFitBatches(Runs(documents, [cut] * 200), 10, 2, **options))
    packer = BestFitBatches(Runs(documents, [cut] * 200), 10, 2, **options)
    for n in range(len(whole)):
        state = packer.state_dict()
        assert state["batches"] == n
        first = state["documents"]["position"]["in_block"]
        assert first % 8 == 0 and state["window_number"] == first // 8
        rest = list(BestFitBatches(Runs(documents[first:], [cut] * 200), 10, 2, **options,
                                   start=_start(state)))  # fmt: skip
        for got, want in zip(rest, whole[n:], strict=False):
            assert all((a == b).all() for a, b in zip(got, want, strict=True) if a is not None)
        next(packer)


def _start(state: dict[str, Any]) -> Any:
    """The parts of a batches state ``BestFitBatches`` reads."""

    class Start:
        window_number = state["window_number"]
        row = state["row"]
        batches = state["batches"]
        window_epoch = state["window_epoch"]
        scheduled = None
        packed = PackingCounts(**state["packed"])
        documents = None  # (not a mixture's: no per-part counts)
        window_documents = None  # (its window whole)
        window_parts = None  # (not a mixture's)
        window_repeats = None  # (no document of its window handed out again)

    return Start()


def test_best_fit_packs_a_window_ahead_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    """Documents go into a window as rows go (an id read for one handed out), not a run at a
    time: a long run is not packed window after window ahead of the batches."""
    packed = []
    seeded = packing.permutation
    monkeypatch.setattr(packing, "permutation", lambda *a: packed.append(a) or seeded(*a))
    documents = documents_of([11] * 400)  # a row each (seq_len 10), 8 rows a window
    packer = BestFitBatches(Runs(documents, [400]), 10, 2, seed=0, pad_id=PAD, window=8)
    for k, _ in enumerate(packer, 1):
        assert len(packed) <= k * 2 // 8 + 2
    assert k == 200 and len(packed) == 50
