"""What packing did (``packed``: padding ids, cut documents, pieces) under a shape schedule
(issues 37 x 38): equal to what the batches handed out say, and carried on by a run resumed
anywhere (before, at and after each change) to the uninterrupted run's figures, for concat
and best fit. Before, concat counted the rows' starts of several batches at one length across
a change, and best fit lost the rows handed out of a window packed again at a change and
counted the pieces of its cut documents again as documents of their own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Schedule
from openwebtext.tokenfiles import megatron_index

EOT = 256
#: Rows of 11, then 7 (at batch 5), then 15 ids (at batch 12): documents of 1 to 40 ids are
#: cut at every length, and best fit packs windows again at both changes.
SCHEDULE = Schedule([(0, 10, 4), (5, 6, 6), (12, 14, 2)])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """600 documents of 1 to 40 ids, each ending with end-of-text (no other id is)."""
    folder = tmp_path_factory.mktemp("scheduled")
    ends = np.cumsum(np.random.default_rng(5).integers(1, 41, size=600))
    ids = np.random.default_rng(6).integers(0, EOT, size=int(ends[-1])).astype("<u2")
    ids[ends - 1] = EOT
    ids.tofile(folder / "train.bin")
    (folder / "train.idx").write_bytes(megatron_index(ends, ids.dtype))
    return Corpus.open_tokens(folder / "train.bin", eot=EOT, unit_tokens=600)


def _batches(corpus: Corpus, packing: str, state: Any = None) -> Any:
    loader = Loader(corpus, tokenizer="bytes", workers=0, seed=1, shuffle_buffer=40)
    options = {"packing": "bestfit", "window": 50} if packing == "bestfit" else {}
    return loader.batches(schedule=SCHEDULE, segments=True, state=state, **options)


def _figures(batches: Any) -> tuple[int, int, int]:
    stats = batches.stats
    return stats.padding_ids, stats.cut_documents, stats.pieces


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_scheduled_run_resumed_anywhere_ends_with_the_uninterrupted_runs_figures(
    corpus: Corpus, packing: str
) -> None:
    with _batches(corpus, packing) as batches:
        whole = len(list(batches))
        final = _figures(batches)
    assert whole > 12 and final[2] > 0  # past both changes, documents cut
    for stop in (3, 4, 5, 6, 11, 12, 13, whole - 1):
        with _batches(corpus, packing) as batches:
            for _ in range(stop):
                next(batches)
            state = batches.state_dict()
        with _batches(corpus, packing, state) as batches:
            assert len(list(batches)) == whole - stop
            assert _figures(batches) == final, f"resumed after batch {stop}"


def test_best_fit_under_a_schedule_counts_what_its_rows_hold(corpus: Corpus) -> None:
    """Every run of one document in a row is a piece of it unless it holds the whole
    document (from position 0 to its end-of-text); a cut document's first piece is at 0."""
    padding = pieces = firsts = 0
    with _batches(corpus, "bestfit") as batches:
        for batch in batches:
            for tokens, segments, positions in zip(*batch[:3], strict=True):
                padding += int((segments == 0).sum())
                starts = np.flatnonzero(np.diff(segments, prepend=-1))
                last = np.append(starts[1:], len(segments)) - 1
                inside = segments[starts] != 0
                whole = (positions[starts] == 0) & (tokens[last] == EOT)
                pieces += int((inside & ~whole).sum())
                firsts += int((inside & ~whole & (positions[starts] == 0)).sum())
        figures = _figures(batches)
    assert figures == (padding, firsts, pieces)
    assert firsts > 0


def test_concat_under_a_schedule_counts_the_documents_its_rows_start_in(corpus: Corpus) -> None:
    """A row that starts at position p > 0 of a document cuts it; its first cut when the row
    before (of its own length) began at or before the document's start: p <= that length."""
    with _batches(corpus, "concat") as batches:
        starts, lengths = [], []
        for batch in batches:
            starts += batch.positions[:, 0].tolist()
            lengths += [batch.tokens.shape[1] - 1] * len(batch.tokens)
        figures = _figures(batches)
    p, before = np.array(starts[1:]), np.array(lengths[:-1])
    cuts, firsts = int((p > 0).sum()), int(((p > 0) & (p <= before)).sum())
    assert figures == (0, firsts, cuts + firsts)
    assert len(set(lengths)) == 3 and firsts > 0
