"""Best fit packing a window again at every change of a ``seq_len`` warm-up (red team, round
18): the work of a packing again was one Python step per piece (``best_fit_rows``' loop), and
a window of long documents first packed at a short length holds many pieces, nearly all of the
old row's length (~290,000 at the default window from 64), so that a change cost ~170 ms; a
run of pieces of one length is now placed at once (the last test counts the steps). What is
packed must not change: the batches (ids, segments, positions, a mixture's parts), the states
at every batch and the stats of a run, and of runs resumed at several points (before, at and
after changes), are pinned by digests of what the code before the change made; and
``best_fit_rows`` is checked against the one-piece-at-a-time loop on pieces of many lengths,
runs of one length among them."""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Mixture, Schedule
from openwebtext.stream.fitting import best_fit_rows
from test_packing_parts import _tokens  # (token files of documents of random lengths)

EOT = 256
#: ``seq_len`` from 4 to 48 in 23 steps, a change every 2 batches to batch 44: long documents
#: are cut into thousands of pieces of 5 ids at first, and packed again at every change.
WARMUP = Schedule.warmup(4, 48, tokens=192, batches=44, stages=23, multiple=1)
#: Lengths that go down and up again: pieces cut again, and pieces of one length among them.
ZIGZAG = Schedule([(0, 40, 4), (3, 6, 16), (5, 9, 12), (8, 3, 24), (10, 30, 4), (13, 12, 8),
                   (15, 20, 6), (18, 7, 12), (21, 64, 2)])  # fmt: skip
SCHEDULES = {"warmup": WARMUP, "zigzag": ZIGZAG}
#: Batches of a run; the batches after which runs are resumed.
BATCHES = 50
STOPS = (1, 2, 3, 9, 20, 21, 45)


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("refit")
    corpus = _tokens(folder / "corpus", 11, 1, 400, 1500)
    parts = {"long": _tokens(folder / "long", 21, 100, 500, 500),
             "short": _tokens(folder / "short", 23, 1, 12, 800)}  # fmt: skip
    return {"corpus": corpus, "mixture": Mixture(parts, {"long": 0.7, "short": 0.3})}


def _batches(source: Any, schedule: Schedule, state: Any = None) -> Any:
    loader = Loader(source, tokenizer="bytes", workers=0, seed=3, shuffle_buffer=40,
                    epochs=None)  # fmt: skip
    return loader.batches(schedule=schedule, segments=True, packing="bestfit", window=120,
                          state=state)  # fmt: skip


def _digest(batch: Any) -> str:
    digest = hashlib.sha256()
    for array in batch:
        if array is not None:
            digest.update(str(array.shape).encode())
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
    return digest.hexdigest()[:16]


def _run(batches: Any, count: int) -> Iterator[tuple[str, str, str]]:
    """Each batch's digest, the state after it and the stats after it (as digests)."""
    for _ in range(count):
        batch = next(batches)
        state = json.dumps(batches.state_dict(), sort_keys=True)
        stats = batches.stats
        parts = [(k, v.cut_documents, v.pieces) for k, v in getattr(stats, "parts", {}).items()]
        figures = json.dumps([stats.padding_ids, stats.cut_documents, stats.pieces, parts])
        yield (_digest(batch), hashlib.sha256(state.encode()).hexdigest()[:16],
               hashlib.sha256(figures.encode()).hexdigest()[:16])  # fmt: skip


def _whole(entries: list[tuple[str, str, str]]) -> str:
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]


def figures(source: Any, schedule: Schedule) -> dict[str, str]:
    """The digest of a run of ``BATCHES`` batches, and of the rest of runs resumed at each of
    ``STOPS`` (what the golden values below were computed by, with the code before)."""
    with _batches(source, schedule) as batches:
        entries = list(_run(batches, BATCHES))
        states = {}
        with _batches(source, schedule) as again:
            for stop in range(1, BATCHES + 1):
                next(again)
                if stop in STOPS:
                    states[stop] = again.state_dict()
    found = {"run": _whole(entries)}
    for stop in STOPS:
        with _batches(source, schedule, states[stop]) as batches:
            rest = list(_run(batches, BATCHES - stop))
        assert rest == entries[stop:], f"resumed after batch {stop}: not the run's batches"
        found[str(stop)] = _whole(rest)
    return found


#: ``figures`` as the code before the change made them (a resumed run's: the rest of the run);
#: since session 42 its states say where the run ends (``"until": null``), and only that: the
#: digests without it are the ones before (547c90fff7b5edf2, 7b25c9012774dbda, 4988a0a3fe6805ea,
#: 551d1cf891c57c88).
GOLDEN = {
    ("corpus", "warmup"): "f5a32682e19b49cb",
    ("corpus", "zigzag"): "e99a8d474c363f6a",
    ("mixture", "warmup"): "7f16e7fca4f7b079",
    ("mixture", "zigzag"): "5190af2bead9510d",
}


@pytest.mark.parametrize("kind", ["corpus", "mixture"])
@pytest.mark.parametrize("name", ["warmup", "zigzag"])
def test_packings_again_hand_out_what_they_did(
    sources: dict[str, Any], kind: str, name: str
) -> None:
    found = figures(sources[kind], SCHEDULES[name])
    assert found["run"] == GOLDEN[(kind, name)]


def _one_at_a_time(lengths: np.ndarray[Any, Any], capacity: int) -> tuple[Any, Any]:
    """Best fit as it was: one piece at a time (the reference)."""
    order = np.argsort(-lengths, kind="stable")
    room: list[int] = []  # (room left * m + row, sorted)
    m, rows, placed = len(lengths) + 1, 0, []
    for n in lengths[order].tolist():
        at = bisect.bisect_left(room, n * m)
        if at == len(room) and not n:
            placed.append(rows - 1)
            continue
        if at == len(room):
            row, left, rows = rows, capacity - n, rows + 1
        else:
            left, row = divmod(room.pop(at), m)
            left -= n
        placed.append(row)
        if left > 0:
            bisect.insort(room, left * m + row)
    row_of = np.empty(len(lengths), dtype=np.int64)
    row_of[order] = placed
    return row_of, order


def test_best_fit_rows_places_runs_of_one_length_as_one_piece_at_a_time_does() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        capacity = int(rng.integers(1, 80))
        many = int(rng.integers(0, 4))  # lengths with runs of many pieces
        lengths = [rng.integers(0, capacity + 1, size=int(rng.integers(0, 60)))]
        for _ in range(many):
            length = int(rng.integers(0, capacity + 1))
            lengths.append(np.full(int(rng.integers(1, 700)), length))
        pieces = np.concatenate(lengths).astype(np.int64)
        rng.shuffle(pieces)
        row_of, order = best_fit_rows(pieces, capacity)
        want_rows, want_order = _one_at_a_time(pieces, capacity)
        assert (order == want_order).all(), trial
        assert (row_of == want_rows).all(), f"trial {trial}: capacity {capacity}"


def test_a_run_of_pieces_of_one_length_is_placed_without_a_step_per_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Packed again, a window's pieces are nearly all of the old row's length: 20,000 of them
    take a few searches of the open rows, not one (and an insertion) per piece."""
    steps = {"n": 0}
    for name in ("bisect_left", "insort", "insort_right"):
        plain = getattr(bisect, name)

        def counted(*args: Any, _plain: Any = plain, **kwargs: Any) -> Any:
            steps["n"] += 1
            return _plain(*args, **kwargs)

        monkeypatch.setattr(bisect, name, counted)
    pieces = np.concatenate([np.full(20_000, 65), np.arange(1, 65)]).astype(np.int64)
    row_of, _ = best_fit_rows(pieces, 200)
    monkeypatch.undo()
    want, _ = _one_at_a_time(pieces, 200)
    assert (row_of == want).all()
    assert steps["n"] < 1_000, f"{steps['n']} searches and insertions for 20,064 pieces"
