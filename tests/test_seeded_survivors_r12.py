"""Behaviour that seeded bugs of round 12 (docs/testing.md) changed with no test failing: each
test here pins one, and was run against its mutant (named by its ID). Round 12 took the
modules no earlier round had named: a mixture's per-part packing (``stream/partpacking.py``),
a mixture's batches under ``set_weights`` (``stream/mixbatches.py``), the rest's spans
(``stream/spans.py``), the states a reshard is given (``stream/given.py``), a repeating pass's
end (``stream/passes.py``), a DataLoader's states (``torch/loaderstates.py``), best fit's
arithmetic (``stream/fitting.py``), the tokenizer's load and the device stage."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Mixture, StateError, reshard


def _mixture(folder: Path, weights: dict[str, float] | None = None) -> Mixture:
    """Two parts of 20 JSON lines each: part ``a``'s documents are all ``a``s, ``b``'s all
    ``b``s (5 to 24 bytes), so a batch's bytes say which part each id is of."""
    for name in ("a", "b"):
        lines = [json.dumps({"text": name * (5 + i)}) + "\n" for i in range(20)]
        (folder / f"{name}.jsonl").write_text("".join(lines))
    parts = {name: str(folder / f"{name}.jsonl") for name in ("a", "b")}
    return Mixture(parts, weights or {"a": 1.0, "b": 1.0})


# -- a mixture's batches under set_weights (stream/mixbatches.py) --------------------------------


def test_weights_set_before_the_first_batch_choose_its_first_document(tmp_path: Path) -> None:
    """MB1: ``set_weights`` at a state whose next batch begins at a document's start (concat,
    ``offset`` 0: here before the first batch) applied the change one document late, as if a
    document were under way: the first document was still chosen by the old weights (a part
    the new weights give 0)."""
    loader: Any = Loader(_mixture(tmp_path), workers=0, seed=0, tokenizer="bytes")
    with loader.batches(16, 2) as it:
        it.set_weights({"b": 1.0})
        first = next(it)
    ids = set(np.asarray(first).ravel().tolist())
    assert ids <= {ord("b"), 256}, ids  # every document of part b (256: end of text)


# -- a mixture's per-part packing (stream/partpacking.py) ----------------------------------------


def test_best_fit_padding_is_of_no_part(tmp_path: Path) -> None:
    """PP9: best fit's padding ids were labelled part 0 in ``PackedBatch.sources`` (documented:
    -1), counted as the first part's ids by a per-part loss."""
    loader = Loader(_mixture(tmp_path), workers=0, seed=0, tokenizer="bytes")
    with loader.batches(16, 2, packing="bestfit", window=4, segments=True) as it:
        batch = next(it)
    padding = batch.segment_ids == 0
    assert batch.sources is not None
    assert padding.any()
    assert set(batch.sources[padding].tolist()) == {-1}
    assert set(batch.sources[~padding].tolist()) == {0, 1}


def test_an_edited_window_repeats_is_refused_where_the_window_is_read_again(
    tmp_path: Path,
) -> None:
    """PP8: a best-fit state's ``window_repeats`` (the documents of its window handed out
    again, what a reshard deals) edited to another count was not checked against the window
    read again: the state resumed as if it were right (a reshard of it deals other
    documents)."""
    from test_red_bestfit_reshard_skips import Case, _layout, _loader, _run
    from test_red_bestfit_reshard_twice import _twice

    case = Case(2, 3, "many", False, "pad", 0, 3, 1, 24, 8)
    layout = _layout(tmp_path, case)
    middles, _, _, _ = _twice(layout, case, ((1, 2), (4, 3, 5)), 2)
    state = copy.deepcopy(middles[2])
    assert state["window_repeats"] == 2
    state["window_repeats"] = 1
    with pytest.raises(StateError, match="window_repeats: 1, but its window holds 2") as caught:
        _run(_loader(layout, case, 2, 3), case, state)
    assert caught.value.field == "window_repeats"


# -- the rest's spans (stream/spans.py) ----------------------------------------------------------


def _jsonl_corpus(folder: Path, n: int) -> Path:
    path = folder / "c.jsonl"
    path.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(n)))
    return path


def _names(path: Path, rank: int, world: int, even: str | None, state: Any = None,
           n: int | None = None) -> tuple[list[str], dict[str, Any], Any]:  # fmt: skip
    """Up to ``n`` document names of rank ``rank`` of ``world`` (from ``state``), the state
    after them and the stats."""
    loader = Loader(path, workers=0, seed=1, rank=rank, world_size=world, even=even)
    with loader.iter(state=state) as it:
        names: list[str] = []
        for document in it:
            names.append(document.name)
            if n is not None and len(names) == n:
                break
        return names, it.state_dict(), it.stats


def test_a_rest_that_divides_evenly_is_not_padded(tmp_path: Path) -> None:
    """SP1: ``pad``'s share of a rest was ``len // world + 1`` (not ``ceil(len / world)``): a
    rest of 18 documents resharded to 3 ranks gave each 7, one repeated per rank (counted)."""
    path = _jsonl_corpus(tmp_path, 24)
    handed, states = [], []
    for rank in range(2):
        names, state, _ = _names(path, rank, 2, "pad", n=3)
        handed += names
        states.append(state)
    shares, repeated = [], 0
    for rank, state in enumerate(reshard(states, 3, even="pad")):
        names, _, stats = _names(path, rank, 3, "pad", state)
        shares.append(len(names))
        handed += names
        repeated += stats.repeated_documents
    assert (shares, repeated) == ([6, 6, 6], 0)
    assert sorted(handed) == sorted(set(handed)) and len(handed) == 24


# -- the states given to a reshard (stream/given.py) ---------------------------------------------


def _batch_states(path: Path, runs: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The batches states of ranks 0.. of ``len(runs)``, rank r stopped after ``runs[r][0]``
    batches of ``Loader.batches(**runs[r][1])``."""
    states = []
    for rank, (stop, kwargs) in enumerate(runs):
        loader = Loader(path, workers=0, seed=0, tokenizer="bytes", rank=rank,
                        world_size=len(runs), even="drop")  # fmt: skip
        with loader.batches(**kwargs) as it:
            for _ in range(stop):
                next(it)
            states.append(json.loads(json.dumps(it.state_dict())))
    return states


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (({"packing": "bestfit", "window": 3}, {"packing": "bestfit", "window": 4}), "window"),
        (({"packing": "concat"}, {"packing": "bestfit", "window": 4}), "packing"),
        (({}, {"seq_len": 32}), "seq_len"),
        (({}, {"batch_size": 3}), "batch_size"),
    ],
)
def test_states_of_other_batches_are_refused_naming_what_differs(
    tmp_path: Path, kwargs: tuple[dict[str, Any], dict[str, Any]], field: str
) -> None:
    """G2: best-fit states of different windows were resharded (the window left out of what
    must agree); G3 and G6: the refusal named the wrong field (``batch_size`` for states of
    different ``seq_len`` and the reverse; ``window`` for states of different packings)."""
    path = _jsonl_corpus(tmp_path, 200)
    runs = [(1, {"seq_len": 16, "batch_size": 2} | k) for k in kwargs]
    with pytest.raises(StateError, match="batches states of different") as caught:
        reshard(_batch_states(path, runs), 1)
    assert caught.value.field == field


def test_a_reshard_checks_each_batches_state_against_its_run(tmp_path: Path) -> None:
    """G5: the batches states given to a reshard were not checked against the runs they were
    taken in (``BatchesState.check_run``): one whose concat ``offset`` was edited was
    resharded, and the new rank went on from a document cut where no batch had cut it."""
    path = _jsonl_corpus(tmp_path, 40)
    states = _batch_states(path, [(1, {"seq_len": 8, "batch_size": 2})] * 2)
    states[1]["offset"] += 1
    with pytest.raises(StateError, match="state 1: bad batches state: offset: is") as caught:
        reshard(states, 1)
    assert caught.value.field == "offset"


# -- best fit's arithmetic (stream/fitting.py) ---------------------------------------------------


def test_a_pad_id_the_documents_dtype_cannot_hold_pads_in_the_batches_dtype(
    tmp_path: Path,
) -> None:
    """F2: best fit's row of padding was made in the documents' ids' dtype (uint16 for bytes)
    even for a ``pad_id`` it cannot hold (-1): an ``OverflowError`` from NumPy, where the row
    is to be made in the batches' ``dtype``."""
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": "x" * (3 + i)}) + "\n" for i in range(30)))
    loader = Loader(path, workers=0, seed=0, tokenizer="bytes")
    with loader.batches(16, 2, packing="bestfit", window=4, pad_id=-1, dtype="int32") as it:
        batch = next(it)
    assert batch.dtype == np.int32 and batch.min() == -1
