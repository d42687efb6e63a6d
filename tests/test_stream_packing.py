"""Document-aware packing (issue 21): ``Loader.batches(segments=True)`` marks where documents
start and how far into them each id is; ``packing="bestfit"`` places whole documents into rows
by best fit, never cutting one shorter than a row, with little padding; both resume exactly."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, StateError
from openwebtext.loader import DocumentIterator
from openwebtext.stream import PackedBatch, cu_seqlens
from openwebtext.stream.packing import best_fit
from resumable import check_save_load, without_units
from support import fit_window

EOT = 256  # the bytes tokenizer's end-of-text id (the only id above 255)


def loader(corpus: Path, **extra: Any) -> Loader:
    return Loader(corpus, tokenizer="bytes", workers=0, seed=1, shuffle_buffer=50, **extra)


def check_rows(batch: PackedBatch, *, padded: bool) -> None:
    """A boundary after every end-of-text and nowhere else, documents numbered from 1 in each
    row, positions counting up from the document's start (at a boundary: 0, or with best fit
    the start of a row-sized piece of a longer document); padding (segment 0) only at the end
    of a row, as ``EOT`` at position 0."""
    tokens, segments, positions, _ = batch  # sources: a mixture's only
    assert tokens.shape == segments.shape == positions.shape
    for row, seg, pos in zip(tokens, segments, positions, strict=True):
        real = seg > 0
        n = int(real.sum())
        assert real[:n].all() and not real[n:].any(), "padding inside a row"
        assert padded or n == len(row)
        assert (row[n:] == EOT).all() and (pos[n:] == 0).all()
        assert seg[0] == 1
        step = np.diff(seg[:n])
        assert set(step.tolist()) <= {0, 1}
        boundary = step == 1
        assert (boundary == (row[: n - 1] == EOT)).all(), "a boundary is not after an eot"
        starts = pos[1:n][boundary]
        piece = len(row) if padded else 1 << 30
        assert (starts % piece == 0).all(), "positions restart at each document"
        assert (pos[1:n][~boundary] == pos[: n - 1][~boundary] + 1).all()


def test_concat_segments_mark_every_document(small_corpus: Path) -> None:
    plain = list(loader(small_corpus).batches(64, 3))
    marked = list(loader(small_corpus).batches(64, 3, segments=True))
    assert len(marked) == len(plain) > 10
    for array, batch in zip(plain, marked, strict=True):
        assert isinstance(batch, PackedBatch)
        assert (batch.tokens == array).all()  # the same ids, now marked
        check_rows(batch, padded=False)
    # A document cut across rows goes on at its position in the next row.
    assert any(b.positions[r, 0] > 0 for b in marked for r in range(3))


def test_bestfit_rows_hold_whole_documents(small_corpus: Path) -> None:
    seq_len = 255
    lengths = {}
    with loader(small_corpus).iter() as docs:
        for doc in docs:
            lengths[doc.name] = len(doc.tokens)
    batches = list(loader(small_corpus).batches(seq_len, 2, segments=True, packing="bestfit"))
    pieces: collections.Counter[int] = collections.Counter()  # pieces per document length
    short = long = 0
    for batch in batches:
        check_rows(batch, padded=True)
        for tokens, seg, pos in zip(*batch[:3], strict=True):
            for s in range(1, int(seg.max()) + 1):
                at = np.flatnonzero(seg == s)
                first, n, ends = int(pos[at[0]]), len(at), tokens[at[-1]] == EOT
                if first == 0 and ends:  # a whole document
                    assert n in lengths.values()
                    short += n <= seq_len + 1
                    continue
                # A piece of a document longer than a row: row-sized, or its last piece.
                long += 1
                assert first % (seq_len + 1) == 0
                assert n == seq_len + 1 or ends
                pieces[n] += 1
    whole_docs = sum(n <= seq_len + 1 for n in lengths.values())
    assert short >= whole_docs - 2 * 2 * (seq_len + 1)  # all, but the rows of a dropped tail
    assert long > 0 and pieces[seq_len + 1] > 0


def test_bestfit_pads_under_5_percent_at_seq_len_1024(small_corpus: Path) -> None:
    gpt2 = Loader(small_corpus, tokenizer="gpt2", workers=0, seed=1)
    batches = list(gpt2.batches(1024, 4, segments=True, packing="bestfit"))
    padding = sum(int((b.segment_ids == 0).sum()) for b in batches)
    assert padding / sum(b.segment_ids.size for b in batches) < 0.05


def test_best_fit_places_longest_first_into_the_tightest_row() -> None:
    assert best_fit([5, 3, 8, 2, 2], 10) == [[2, 3], [0, 1, 4]]
    assert best_fit([10, 10], 10) == [[0], [1]]
    assert best_fit([], 10) == []


def test_cu_seqlens_of_segments() -> None:
    segments = np.array([[1, 1, 2, 0], [1, 1, 1, 1]])
    assert cu_seqlens(segments).tolist() == [0, 2, 3, 4, 8]
    assert cu_seqlens(segments).dtype == np.int32


def key(batch: Any) -> Any:
    if isinstance(batch, tuple):  # a PackedBatch (its sources: None, one corpus)
        return tuple(a.tolist() for a in batch if a is not None)
    return batch.tolist()


@pytest.mark.parametrize(
    ("packing", "segments"),
    [
        ("concat", True),
        # ~20 s; best fit's state with segments resumes in test_token_corpus.py's
        # test_packed_batches_resume_exactly[bestfit-True], best fit over text in [bestfit-False]:
        pytest.param("bestfit", True, marks=pytest.mark.slow),
        ("bestfit", False),
    ],
)
def test_packed_batches_resume_exactly(packing: str, segments: bool, small_corpus: Path) -> None:
    def start(state: dict[str, Any] | None, epochs: int) -> Any:
        return loader(small_corpus, epochs=epochs).batches(
            96, 2, state=state, segments=segments, packing=packing, window=fit_window(packing, 17)
        )

    check_save_load(start, key=key)


@pytest.mark.parametrize("take", [0, 5, 13, 40, 119, 500])
def test_a_run_cut_by_take_resumes_to_the_rows_of_the_uninterrupted_run(
    small_corpus: Path, take: int
) -> None:
    """``take`` never cuts a best-fit window (it is read whole, to the end of the window the
    last document is in): a state taken after a run of ``take`` documents resumes to the very
    rows the uninterrupted run hands out after those (a window cut short was packed from fewer
    documents, and its state resumed into the whole window's rows: ids lost and doubled)."""

    def rows(state: Any = None, **extra: Any) -> tuple[list[bytes], Any]:
        with loader(small_corpus, epochs=1, **extra).batches(
            64, 2, segments=True, packing="bestfit", window=10, state=state
        ) as it:
            return [row.tobytes() for b in it for row in b.tokens], it.state_dict()

    whole, _ = rows()
    first, state = rows(take=take)
    rest, _ = rows(state)
    assert (len(first) == 0) == (take == 0)
    assert first + rest == whole


@pytest.mark.parametrize(("packing", "take"), [("concat", 1), ("concat", 3), ("bestfit", 1)])
def test_runs_of_take_resumed_from_each_other_go_on(
    small_corpus: Path, packing: str, take: int
) -> None:
    """A resumed run's ``take`` does not count the document its first batch is inside (concat)
    nor that window (best fit): the run that began them counted them. Before, a run of
    ``take=1`` resumed inside a document re-read it, counted it, and handed out nothing: its
    state was the one it resumed from, and a loop of such runs (``owt stream --resume s.json
    --take 1 --state-out s.json``) never went on. Concat: a run of 3 then one of 4 hand out
    the rows of one run of 7; every chain's rows are the uninterrupted run's."""

    def rows(state: Any = None, **extra: Any) -> tuple[list[bytes], Any]:
        with loader(small_corpus, epochs=1, **extra).batches(
            64, 2, packing=packing, window=fit_window(packing, 4), state=state
        ) as it:
            return [row.tobytes() for b in it for row in b], it.state_dict()

    whole, _ = rows()
    chain: list[bytes] = []
    state = None
    for _ in range(12):
        more, after = rows(state, take=take)
        assert after != state and more, len(chain)  # each run goes on
        chain, state = chain + more, after
    assert chain == whole[: len(chain)]
    if packing == "concat":
        three, after = rows(take=3)
        assert three + rows(after, take=4)[0] == rows(take=7)[0]


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_closed_batches_end_where_they_were_closed(small_corpus: Path, packing: str) -> None:
    """``close`` ends the batches: ``next`` raises StopIteration, though rows were made ahead
    (they were handed out after close), and the state stays where the last batch left it, so
    a resumed run hands out what the closed one had not."""

    def batches(state: Any = None) -> Any:
        window = fit_window(packing, 5)
        return loader(small_corpus, epochs=1).batches(64, 2, packing=packing, window=window,
                                                      state=state)  # fmt: skip

    with batches() as it:
        whole = [b.tobytes() for b in it]
    it = batches()
    first = [next(it).tobytes() for _ in range(3)]
    saved = it.state_dict()
    it.close()
    it.close()
    assert next(it, None) is None and list(it) == []
    assert it.state_dict() == saved
    with batches(saved) as rest:
        assert first + [b.tobytes() for b in rest] == whole


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
@pytest.mark.parametrize("lands", [1, 2, 4])  # (of 4 reads: a block's rest each)
def test_an_interrupt_inside_next_leaves_the_state_of_the_last_batch(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, packing: str, lands: int
) -> None:
    """A Ctrl-C inside ``next`` once the documents' run was read (the ``lands``-th read; best
    fit also reads the next window after a batch is made): the state is the one after the
    last batch handed out, which resumes to the uninterrupted run, and a ``next`` after is an
    error. Before, the same iterator went on with batches missing that run's ids, and best
    fit's state counted the batch never handed out or lost the window being packed."""

    def batches(state: Any = None) -> Any:
        window = fit_window(packing, 7)
        return loader(small_corpus, epochs=2).batches(512, 4, packing=packing, window=window,
                                                      state=state)  # fmt: skip

    with batches() as it:
        whole = [b.tobytes() for b in it]
    real, reads = DocumentIterator.next_run, [0]

    def next_run(self: DocumentIterator, in_order: bool = False) -> Any:
        run = real(self, in_order)
        reads[0] += 1
        if reads[0] == lands:
            raise KeyboardInterrupt
        return run

    monkeypatch.setattr(DocumentIterator, "next_run", next_run)
    first, it = [], batches()
    with pytest.raises(KeyboardInterrupt):
        while True:
            first.append(next(it).tobytes())
    saved = it.state_dict()
    with pytest.raises(RuntimeError, match=r"failed inside an earlier next\(\) \(Keyboard"):
        next(it)
    monkeypatch.setattr(DocumentIterator, "next_run", real)
    with batches(saved) as rest:
        assert first + [b.tobytes() for b in rest] == whole


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_a_run_of_take_stopped_anywhere_resumes_with_the_take_it_has_left(
    small_corpus: Path, packing: str
) -> None:
    """A run of ``take=9`` stopped after any batch and resumed with ``take`` = 9 less the
    documents it began (those handed out, and the one its next concat batch is inside or the
    best-fit window's), or 0, hands out the rest of the run of 9 and its state (units read
    aside: the cut one is read again). ``take=0`` begins nothing and finishes what the state
    began: before, it handed out nothing (the rest of that document or window lost, after a
    ``set_weights`` too)."""

    def batches(state: Any = None, **extra: Any) -> Any:
        return loader(small_corpus, epochs=1, **extra).batches(
            64, 2, packing=packing, window=fit_window(packing, 5), state=state
        )

    with batches(take=9) as it:
        whole, end = [b.tobytes() for b in it], it.state_dict()
    left = []
    for stop in [*range(0, len(whole) - 3, 23), *range(len(whole) - 3, len(whole))]:
        with batches(take=9) as it:
            first = [next(it).tobytes() for _ in range(stop)]
            saved = it.state_dict()
        inside = saved["offset"] > 0 if packing == "concat" else bool(saved["row"])
        begun = saved["documents"]["counters"].get("documents", 0)  # (before the one inside)
        begun += (5 if packing == "bestfit" else 1) if inside else 0  # (a window: 5 counted)
        left.append(max(0, 9 - begun))  # (best fit read the 9th's window whole: 10)
        with batches(saved, take=left[-1]) as it:
            assert first + [b.tobytes() for b in it] == whole, stop
            assert without_units(it.state_dict()) == without_units(end), stop
    assert 0 in left[1:]  # (runs of take=0 resumed inside what was begun, with rows left)


def test_a_row_past_its_window_says_what_the_state_may_be(small_corpus: Path) -> None:
    """A best-fit state whose row lies past its window read again (a run that read on past
    where this one ends, resumed with fewer epochs; or an edited state) is one StateError: as
    the window is read; in the run's first window, whose rows are all the batches', at once."""
    with loader(small_corpus).batches(64, 2, packing="bestfit", window=5) as it:
        states = [it.state_dict() for _ in it]
    first = next(s for s in states if s["row"])
    later = next(s for s in states if s["row"] and s["window_number"])
    with pytest.raises(StateError, match=r"row: is 1000000: the rows out of the first window"):
        loader(small_corpus).batches(64, 2, packing="bestfit", window=5, state={**first,
                                                                              "row": 10**6})
    state = {**later, "row": 10**6}
    with pytest.raises(StateError, match=r"row 1000000 of a window of \d+ rows: the window read"):
        next(loader(small_corpus).batches(64, 2, packing="bestfit", window=5, state=state))


def test_bestfit_is_deterministic_and_refuses_other_packings(small_corpus: Path) -> None:
    def first(packing: str, state: Any = None, **extra: Any) -> Any:
        with loader(small_corpus).batches(96, 2, packing=packing, state=state, **extra) as b:
            return next(b), b.state_dict()

    one, state = first("bestfit", window=17)
    assert (one == first("bestfit", window=17)[0]).all()
    with pytest.raises(StateError, match=r"packing='bestfit', window=17; now packing='concat'$"):
        first("concat", state)
    with pytest.raises(StateError, match="window=17; now packing='bestfit', window=18"):
        first("bestfit", state, window=18)
    _, concat = first("concat")  # (its window was said as the one asked for: red team, 28)
    with pytest.raises(StateError, match=r"for packing='concat'; now packing='bestfit', window=17"):
        first("bestfit", concat, window=17)
    with pytest.raises(ValueError, match="packing must be one of"):
        first("firstfit")


def test_a_window_is_best_fits_only_and_defaults_to_window(small_corpus: Path) -> None:
    """Concat refuses a window, as it refuses a ``pad_id`` (it would be ignored); best fit
    without one packs over ``WINDOW`` documents (its state says so)."""
    from openwebtext.stream import WINDOW

    pytest.importorskip("torch")
    from openwebtext.torch import PackedBatchDataset

    with pytest.raises(ValueError, match=r"window is best fit's .* leave it out, or pass packing="):
        loader(small_corpus).batches(64, 2, window=5)
    with pytest.raises(ValueError, match="window is best fit's"):
        PackedBatchDataset(small_corpus, 64, 2, tokenizer="bytes", packing="concat", window=5)
    with loader(small_corpus).batches(64, 2, packing="bestfit") as batches:
        next(batches)
        assert batches.state_dict()["window"] == WINDOW
    with loader(small_corpus).batches(64, 2, packing="concat", window=None) as batches:
        next(batches)
        assert "window" not in batches.state_dict() or batches.state_dict()["window"] is None
