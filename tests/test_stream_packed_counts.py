"""What packing did, counted live (issue 37): padding ids, cut documents and their pieces in the
batches' ``stats`` and state (``packed``), equal to what the documents' lengths and the batches
handed out say, and carried on by a resumed run to the uninterrupted run's figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.stream.counters import PackingCounts
from openwebtext.stream.schema import BatchesState
from openwebtext.tokenfiles import megatron_index

EOT = 256
SEQ_LEN = 10  # a row holds 11 ids


@pytest.fixture(scope="module")
def lengths() -> np.ndarray[Any, Any]:
    """Documents of 1 to 40 ids: a third longer than a row."""
    return np.random.default_rng(5).integers(1, 41, size=600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, lengths: np.ndarray[Any, Any]) -> Corpus:
    """A token corpus of ``lengths``, each document's last id end-of-text; unit by unit a few
    dozen documents."""
    folder = tmp_path_factory.mktemp("packed")
    ends = np.cumsum(lengths)
    ids = np.random.default_rng(6).integers(0, EOT, size=int(ends[-1])).astype("<u2")
    ids[ends - 1] = EOT
    ids.tofile(folder / "train.bin")
    (folder / "train.idx").write_bytes(megatron_index(ends, ids.dtype))
    return Corpus.open_tokens(folder / "train.bin", eot=EOT, unit_tokens=600)


def _loader(corpus: Corpus) -> Loader:
    return Loader(corpus, tokenizer="bytes", workers=0, seed=1, shuffle_buffer=40)


def _options(packing: str) -> dict[str, Any]:
    return {"packing": "bestfit", "window": 50} if packing == "bestfit" else {}


def test_best_fit_counts_its_padding_and_the_documents_longer_than_a_row(
    corpus: Corpus, lengths: np.ndarray[Any, Any]
) -> None:
    cap = SEQ_LEN + 1
    with _loader(corpus).batches(SEQ_LEN, 1, segments=True, **_options("bestfit")) as batches:
        padding = sum(int((batch.segment_ids == 0).sum()) for batch in batches)
        stats = batches.stats
    cut = lengths[lengths > cap]  # a batch of one row: every row is handed out
    assert stats.padding_ids == padding > 0
    assert stats.cut_documents == len(cut) > 0
    assert stats.pieces == int((-(-cut // cap)).sum())


def test_concat_counts_the_documents_the_rows_cut(corpus: Corpus) -> None:
    """Row r starts at id r * SEQ_LEN of the documents end to end: a document that holds such
    a start inside it is cut there (one piece more, two at its first cut)."""
    with _loader(corpus).batches(SEQ_LEN, 3, segments=True) as batches:
        got = list(batches)
        stats = batches.stats
    documents = np.concatenate([b.segment_ids[:, :-1].reshape(-1) for b in got])
    positions = np.concatenate([b.positions[:, :-1].reshape(-1) for b in got])
    starts = np.arange(SEQ_LEN, len(positions), SEQ_LEN)  # of every row but the first
    inside = starts[positions[starts] > 0]  # a row starting inside a document
    # The document each cut falls in, across batches: numbered by where it began.
    began = np.flatnonzero(positions == 0)
    cut_documents = np.searchsorted(began, inside, "right")
    assert stats.cut_documents == len(set(cut_documents.tolist())) > 0
    assert stats.pieces == len(inside) + stats.cut_documents
    assert stats.padding_ids == 0
    assert documents.min() >= 1


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_resumed_run_ends_with_the_uninterrupted_runs_figures(
    corpus: Corpus, packing: str
) -> None:
    loader, options = _loader(corpus), _options(packing)
    with loader.batches(SEQ_LEN, 4, **options) as batches:
        whole = len(list(batches))
        final = batches.stats
        last = BatchesState.from_json(batches.state_dict()).packed
    assert (final.padding_ids, final.cut_documents, final.pieces) == (
        last.padding_ids, last.cut_documents, last.pieces,
    )  # fmt: skip
    assert final.pieces > 0
    for stop in (1, whole // 3, whole - 1):
        with loader.batches(SEQ_LEN, 4, **options) as batches:
            for _ in range(stop):
                next(batches)
            state = batches.state_dict()
        with loader.batches(SEQ_LEN, 4, state=state, **options) as batches:
            assert len(list(batches)) == whole - stop
            resumed = batches.stats
        figures = (resumed.padding_ids, resumed.cut_documents, resumed.pieces)
        assert figures == (final.padding_ids, final.cut_documents, final.pieces)


def test_a_state_saved_before_packed_was_counted_reads_as_nothing_counted() -> None:
    golden = json.loads((Path(__file__).parent / "data" / "states-2.json").read_text())
    state = golden["batches_bestfit"]
    old = {key: value for key, value in state.items() if key != "packed"}
    assert BatchesState.from_json(old).packed == PackingCounts()
    assert BatchesState.from_json(state).packed != PackingCounts()
