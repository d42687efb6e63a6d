"""Best-fit batches resharded after skips under ``even=None`` (window=3, seq_len=24,
batch_size=1, not shuffled, ``on_error="skip"``, bytes), where a whole unit's lines are bad
(``{"text": 5}``): its slots hold no document. Oracle: the documents the old ranks handed out
before their states and those the new rank hands out after the reshard are the epoch's kept
documents, each once per epoch (and a state resumed on its world size goes on as the
uninterrupted run).

Red-team defect 2 (plain corpus): a window whose first slots held no document started at its
first document, but its state's position stayed at the original start, so a reshard dealt the
empty slots as the window (its documents lost, the next window's handed out twice); and a
window following a dealt window whose tail slots are a skipped unit began inside that tail.
Fixed in ``packing.BestFitBatches._read``: a window starts at its first document, its mark
(and its state's position) too.

Red-team defect 1 (mixture): a one-part mixture's window all of whose documents are of the
part's next epoch, its state's mark in the epoch before with skipped slots left, was dealt as
skipped slots of the first epoch. Fixed: the state says a window's slots of each part's next
epoch (``window_next``), and the reshard deals every slot left of the share before them.
"""

from __future__ import annotations

import collections
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus, CorpusError, Loader, Mixture, StateError, reshard
from openwebtext.index import Counts
from support import bestfit_doc_names

LINES = {"a": 6, "b": 5, "c": 7, "d": 4, "e": 6, "f": 5}


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "openwebtext")  # (restored after the test)


def _text(name: str, k: int) -> str:
    return f"{name}{k} " + "x" * ((7 * k + 5 * ord(name)) % 18 + 4)


def _corpus(root: Path, bad_unit: str) -> Corpus:
    for name, n in LINES.items():
        lines = [b'{"text": 5}' if name == bad_unit else json.dumps({"text": _text(name, k)})
                 .encode() for k in range(n)]  # fmt: skip
        (root / f"{name}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    corpus = Corpus.open(root, on_error="skip")
    names = [Path(u.path).name.split(".")[0] for u in corpus.units]
    return corpus.with_counts(Counts(tuple(LINES[n] for n in names)))


def _run(data: Any, rank: int, world: int, *, epochs: int = 1,
         state: Any = None) -> tuple[list[list[str]], list[Any]]:  # fmt: skip
    loader = Loader(data, rank=rank, world_size=world, even=None, shuffle=False, seed=3,
                    workers=0, on_error="skip", tokenizer="bytes", epochs=epochs)  # fmt: skip
    out: list[list[str]] = []
    with loader.batches(seq_len=24, batch_size=1, packing="bestfit", window=3, segments=True,
                        state=state) as it:  # fmt: skip
        states = [json.loads(json.dumps(it.state_dict()))]
        try:
            for batch in it:
                out.append(bestfit_doc_names(batch))
                states.append(json.loads(json.dumps(it.state_dict())))
        except CorpusError as exc:  # pragma: no cover (a failure the oracle names)
            out.append([f"ERROR {exc}"])
    return out, states


def _handed(data: Any, stops: tuple[int, ...], epochs: int, to: int = 1,
            seen: set[str] | None = None) -> collections.Counter[str]:  # fmt: skip
    """Old ranks stopped after ``stops`` batches, resharded to ``to`` ranks, which run on
    (``seen``: gets the window fields the old ranks' states said)."""
    handed: list[str] = []
    states = []
    for rank, stop in enumerate(stops):
        batches, at = _run(data, rank, len(stops), epochs=epochs)
        stop = min(stop, len(batches))
        handed += [d for b in batches[:stop] for d in b]
        states.append(at[stop])
        if seen is not None:
            seen.update(k for k in ("window_slots", "window_next") if k in at[stop])
        if stop:  # a state inside a window resumes as the uninterrupted run goes on
            again, _ = _run(data, rank, len(stops), epochs=epochs, state=at[stop])
            assert again == batches[stop:], (rank, stop)
    for rank, state in enumerate(reshard(states, to, even=None)):
        batches, _ = _run(data, rank, to, epochs=epochs, state=state)
        handed += [d for b in batches for d in b]
    return collections.Counter(handed)


@pytest.mark.parametrize(("unit", "stops"), [("a", (1, 2)), ("c", (9, 2)), ("d", (0, 3))])
def test_a_unit_all_of_whose_lines_are_bad(tmp_path: Path, unit: str,
                                           stops: tuple[int, int]) -> None:  # fmt: skip
    kept = collections.Counter(f"{n}{k}" for n in LINES for k in range(LINES[n]) if n != unit)
    got = _handed(_corpus(tmp_path, unit), stops, 1)
    assert (sorted((kept - got).elements()), sorted((got - kept).elements())) == ([], [])


def _clean(root: Path) -> Corpus:
    """A small clean part (``g``, ``h``): it ends its epochs first, and goes on repeated."""
    root.mkdir()
    for name, n in {"g": 3, "h": 4}.items():
        lines = [json.dumps({"text": _text(name, k)}) + "\n" for k in range(n)]
        (root / f"{name}.jsonl").write_text("".join(lines))
    return Corpus.open(root)


#: Stops of old ranks 0 and 1 where a window crosses the part's epoch end (each failed before
#: the fix for one of the bad units); the slow group runs every pair of the first 16 and 24.
PINNED = [(s, t) for s in (0, 9) for t in (0, 9, 11, 12, 14, 15, 20)]
EVERY = [(s, t) for s in range(16) for t in range(24)]


@pytest.mark.parametrize(("parts", "stops"), [
    (1, PINNED), pytest.param(1, EVERY, marks=pytest.mark.slow, id="1-every"),
    pytest.param(2, PINNED, marks=pytest.mark.slow, id="2-pinned")])  # fmt: skip
@pytest.mark.parametrize("unit", ["a", "c", "f"])
def test_a_part_s_window_across_its_epoch_end_after_skipped_slots(
    tmp_path: Path, unit: str, parts: int, stops: list[tuple[int, int]]
) -> None:
    """Red-team defect 1, at stops of old ranks (pinned; every one in the slow group), resharded
    to 1 and 3 ranks: a part's window crossing its epoch end holds every slot left of its share
    there (skipped ones after its last document of the epoch, or all it holds there) and then
    its next epoch's slots the state says (``window_next``). Before the fix a window all in the
    next epoch was dealt as skipped slots of the first (``a0`` lost, ``c6`` twice). Part ``x``'s
    documents are counted (each kept one once per epoch); ``y``'s, as often served, end their
    epochs first on every rank, and go on repeated until ``x``'s end (two parts: slow group)."""
    (tmp_path / "x").mkdir()
    named = {"x": _corpus(tmp_path / "x", unit)}
    if parts == 2:
        named["y"] = _clean(tmp_path / "y")
    mixture = Mixture(named, weights={"x": 0.5, "y": 0.5} if parts == 2 else None)
    kept = collections.Counter(f"{n}{k}" for n in LINES for k in range(LINES[n]) if n != unit)
    seen: set[str] = set()
    for stop in stops:
        for to in (1, 3):
            got = _handed(mixture, stop, 2, to, seen)
            got = collections.Counter({d: n for d, n in got.items() if d[0] in LINES})
            assert (sorted((kept + kept - got).elements()),
                    sorted((got - kept - kept).elements())) == ([], []), (stop, to)  # fmt: skip
    assert "window_next" in seen  # (the grid holds windows across the epoch end)


@pytest.mark.parametrize(("unit", "stops", "again"), [("c", (6, 9), (4, 2)),
                                                      ("f", (12, 0), (6, 4))])  # fmt: skip
def test_a_window_across_a_part_s_epoch_end_resharded_again_is_refused(
    tmp_path: Path, unit: str, stops: tuple[int, int], again: tuple[int, int]
) -> None:
    """A new rank's window crossing the part's epoch end, its states resharded again, is
    refused (``StateError``: resume on the same world size), never dealt as the slots its
    documents would fill in the epoch it began in (``dealing._part_windows_left``: a window
    whose state says ``window_next``; without that refusal, ``a0``, ``b3`` lost)."""
    mixture = Mixture({"x": _corpus(tmp_path, unit)})
    olds = [_run(mixture, r, 2, epochs=2)[1][stop] for r, stop in enumerate(stops)]
    new = reshard(olds, 2, even=None)
    states = [_run(mixture, r, 2, epochs=2, state=new[r])[1][k] for r, k in enumerate(again)]
    assert any("window_next" in s for s in states)
    with pytest.raises(StateError, match="crosses the epoch's end"):  # (where it is read)
        _run(mixture, 0, 1, epochs=2, state=reshard(states, 1, even=None)[0])


def test_an_edited_window_next_is_refused_where_the_window_is_read_again(tmp_path: Path) -> None:
    """``window_next`` is what a reshard alone reads of a window: resumed on its world size,
    a state whose ``window_next`` another crossing was written into is refused naming it."""
    mixture = Mixture({"x": _corpus(tmp_path, "c")})
    states = _run(mixture, 1, 2, epochs=2)[1]
    state = next(s for s in states if "window_next" in s)
    for field, value in (("slots", 1), ("ends", 1)):
        edited = json.loads(json.dumps(state))
        edited["window_next"][0][field] += value
        with pytest.raises(StateError) as info:
            _run(mixture, 1, 2, epochs=2, state=edited)
        assert info.value.field == "window_next"
