"""Best-fit batches of a mixture, resharded: the window each old rank had begun (documents of
several parts, in the old rank's turns) is dealt to one new rank, which hands out the rows the
old rank had not, the very rows the old rank would have; the rest of every part's epoch is
each document once over old and new ranks; a state saved inside a dealt window resumes
exactly."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Mixture, Schedule, StateError, reshard
from tables_support import mixture_folders

S, B, WINDOW = 127, 2, 5  # small windows of long rows: old ranks stop inside one
STOPS = (1, 2, 0, 3)  # batches each of 4 old ranks hands out (rank 2: none, no window begun)


@pytest.fixture(scope="module")
def parts(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """web: the small tar corpus (120 documents); pq: 50 parquet rows; js: 30 JSON lines."""
    return mixture_folders(small_corpus, tmp_path_factory.mktemp("mix"))


def opts(rank: int, world: int, **extra: Any) -> dict[str, Any]:
    return {"workers": 0, "seed": 5, "rank": rank, "world_size": world, "even": None,
            "epochs": None, "tokenizer": "bytes", **extra}  # fmt: skip


def rows(
    m: Mixture, state: Any, rank: int, world: int, n: int, change: Any = None,
    shape: Any = None, **extra: Any,
) -> tuple[list[tuple[bytes, bytes, bytes]], Any, int | None]:  # fmt: skip
    """``n`` best-fit batches as rows (ids, segment ids, parts), the state after them (after
    ``set_weights(change)``, if given), and the rows of the window the start was in that were
    left (None: it did not end in them). ``shape``: the batches' sizes (``S`` by ``B``)."""
    out: list[tuple[bytes, bytes, bytes]] = []
    left = None
    loader = Loader(m, **opts(rank, world, **extra))
    sizes = shape or {"seq_len": S, "batch_size": B}
    with loader.batches(**sizes, packing="bestfit", window=WINDOW, segments=True,
                        state=state) as it:  # fmt: skip
        first = it.state_dict()["window_number"]
        for _ in range(n):
            batch = next(it)
            out += [(t.tobytes(), g.tobytes(), p.tobytes())
                    for t, g, p in zip(batch.tokens, batch.segment_ids, batch.sources,
                                       strict=True)]  # fmt: skip
            now = it.state_dict()
            if left is None and now["window_number"] != first:
                left = len(out) - now["row"]
        if change is not None:
            it.set_weights(change)
        return out, json.loads(json.dumps(it.state_dict())), left


@pytest.mark.parametrize(
    ("by", "sampling", "schedule", "change"),
    [("documents", "stratified", (), None), ("tokens", "stratified", (), None),
     ("documents", "random", (), None),
     ("tokens", "stratified", ((2, {"web": 0.1, "pq": 0.9}),), None),  # inside the windows
     ("tokens", "stratified", (), {"web": 0.1, "pq": 0.9}),  # set at the stop, not yet applied
     ("documents", "random", (), {"web": 0.2, "pq": 0.3, "js": 0.5})],
)  # fmt: skip
def test_a_dealt_window_hands_out_the_rows_its_old_rank_would_have(
    parts: dict[str, str], by: str, sampling: str, schedule: Any, change: Any
) -> None:
    """4 ranks stopped inside best-fit windows (rank 2 before any), resharded to 3 and to 1:
    each new rank starts with the windows dealt to it (round robin over the old ranks that
    had begun one), each the rows its old rank would have handed out next, in order. A
    ``set_weights`` made at the stop is a change not yet applied, which each dealt window
    carries (``Replay.changes``)."""
    weights = {"web": 0.6, "pq": 0.4, "js": 0.0}
    m = Mixture(parts, weights, by=by, sampling=sampling, schedule=list(schedule))
    states, going_on = [], []
    for rank, stop in enumerate(STOPS):
        _, state, _ = rows(m, None, rank, 4, stop, change)
        states.append(state)
        rest, _, left = rows(m, state, rank, 4, 200)  # the old rank, resumed
        assert left is not None or not state["row"]
        going_on.append(rest[: left or 0])
    begun = [r for r, s in enumerate(states) if s["row"]]
    assert begun == [0, 1, 3]
    assert all(len(states[r]["window_parts"]) == 3 for r in begun)
    assert any(states[r]["window_parts"][0] and states[r]["window_parts"][1] for r in begun)
    for world in (3, 1):
        new = reshard(states, world)
        pending = [r.get("changes") for s in new for r in s["documents"]["replays"]]
        assert all(pending) == (change is not None)
        for rank, state in enumerate(new):
            dealt = [going_on[r] for r in begun[rank::world]]
            expected = [row for window in dealt for row in window]
            got, _, _ = rows(m, state, rank, world, len(expected) // B + 1)
            assert got[: len(expected)] == expected, (world, rank)


def test_the_rest_of_every_part_is_each_document_once(parts: dict[str, str]) -> None:
    """The documents behind those batches (``Loader.iter`` of their ``documents`` states):
    per part, the old ranks' documents before their windows, then the new ranks' (the dealt
    windows' first, then their own) are each document of the part's epoch once; after the
    dealt windows, each new rank's own proportions are within one document."""
    m = Mixture(parts, {"web": 0.6, "pq": 0.4, "js": 0.0})
    old: dict[str, list[str]] = collections.defaultdict(list)
    states = []
    for rank, stop in enumerate(STOPS):
        _, state, _ = rows(m, None, rank, 4, stop)
        states.append(state)
        before = state["documents"]["handed"]  # (the documents before its window)
        with Loader(m, **opts(rank, 4)).iter() as it:
            for _ in range(before):
                document = next(it)
                old[document.source].append(document.name)
    sizes = {"web": 120, "pq": 50}
    for world in (3, 1):
        new: dict[str, list[str]] = collections.defaultdict(list)
        for rank, state in enumerate(reshard(states, world)):
            documents = state["documents"]
            dealt = sum(sum(r["left"]) for r in documents.get("replays", []))
            counts = collections.Counter[str]()
            with Loader(m, **opts(rank, world)).iter(state=documents) as it:
                for n in range(1, 1000):
                    document = next(it)
                    if n > dealt:  # the rank's own turns, counted from the reshard
                        counts[document.source] += 1
                        own = n - dealt
                        assert all(abs(counts[k] - w * own) <= 1 for k, w in
                                   (("web", 0.6), ("pq", 0.4))), counts  # fmt: skip
                    if it.stats.epochs[document.source] == 0:
                        new[document.source].append(document.name)
                    if all(it.stats.epochs[k] >= 1 for k in sizes):
                        break
        for name, size in sizes.items():
            together = old[name] + new[name]
            assert len(together) == len(set(together)) == size, (world, name)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_inside_a_dealt_window_resumes_exactly(parts: dict[str, str], workers: int) -> None:
    """The one new rank of a reshard to 1, cut at batches inside and between its dealt
    windows and resumed (0 and 2 workers): the rows of the uninterrupted run. A state taken
    inside them resharded again to 2: the new ranks hand out the rows of the windows left,
    those the state would have, before their own."""
    m = Mixture(parts, {"web": 0.6, "pq": 0.4, "js": 0.0}, by="tokens")
    states = [rows(m, None, rank, 4, stop)[1] for rank, stop in enumerate(STOPS)]
    (state,) = reshard(states, 1)
    whole, _, _ = rows(m, state, 0, 1, 120, workers=workers)
    dealt = []  # whether each cut is inside the dealt windows (the first 68 batches)
    for cut in (1, 14, 40, 67, 68, 100):
        first, saved, _ = rows(m, state, 0, 1, cut, workers=workers)
        dealt.append(bool(saved["documents"].get("replays")))
        then, _, _ = rows(m, saved, 0, 1, 120 - cut, workers=workers)
        assert first + then == whole, cut
    assert dealt == [True, True, True, True, False, False]
    _, inside, _ = rows(m, state, 0, 1, 1)
    again: list[tuple[bytes, bytes, bytes]] = []
    for rank, state in enumerate(reshard([inside], 2, even=None)):
        loader = Loader(m, **opts(rank, 2, workers=workers))
        with loader.batches(S, B, packing="bestfit", window=WINDOW, segments=True,
                            state=state) as it:  # fmt: skip
            while it.state_dict()["documents"].get("replays") or it.state_dict()["row"]:
                batch = next(it)
                again += [(t.tobytes(), g.tobytes(), p.tobytes())
                          for t, g, p in zip(batch.tokens, batch.segment_ids, batch.sources,
                                             strict=True)]  # fmt: skip
    assert sorted(again) == sorted(whole[B : 68 * B])


def _ids(rows_out: list[tuple[bytes, bytes, bytes]]) -> collections.Counter[int]:
    """The ids of the documents in rows (padding left out), counted."""
    ids: collections.Counter[int] = collections.Counter()
    for tokens, segments, _ in rows_out:
        seg = np.frombuffer(segments, dtype=np.int32)
        tok = np.frombuffer(tokens, dtype=f"u{len(tokens) // len(seg)}")
        ids.update(tok[seg != 0].tolist())
    return ids


def test_a_dealt_window_under_a_schedule_of_shapes_hands_out_its_old_rank_s_ids(
    parts: dict[str, str],
) -> None:
    """Under a schedule of shapes (127 ids a row, 63 from batch 2), 4 ranks stopped inside
    best-fit windows (rank 3 past the change: its window packed again, ``Replay.packings``),
    resharded to 3 and to 1. The new ranks are at the furthest old rank's batch, so they pack
    a dealt window at 63 where its old rank went on at 127 first: the rows differ (each batch
    of the new shape, a window dealt packed at 127 packed again at 63 before its rows go), and
    the ids of its documents left are those the old rank would have handed out, each once."""
    shape = {"schedule": Schedule([(0, S, B), (2, 63, 3)])}
    m = Mixture(parts, {"web": 0.6, "pq": 0.4, "js": 0.0}, by="tokens")
    states, going_on = [], []
    for rank, stop in enumerate(STOPS):
        _, state, _ = rows(m, None, rank, 4, stop, shape=shape)
        states.append(state)
        rest, _, left = rows(m, state, rank, 4, 200, shape=shape)
        going_on.append(rest[: left or 0])
    assert len(states[3]["schedule"]["packings"]) == 2  # (packed again at the change)
    begun = [r for r, s in enumerate(states) if s["row"]]
    for world in (3, 1):
        for rank, state in enumerate(reshard(states, world)):
            assert state["documents"]["replays"]
            got: list[tuple[bytes, bytes, bytes]] = []
            loader = Loader(m, **opts(rank, world))
            with loader.batches(**shape, packing="bestfit", window=WINDOW, segments=True,
                                state=state) as it:  # fmt: skip
                while it.state_dict()["documents"].get("replays"):
                    sizes = (it.batch_size, it.seq_len + 1)  # (63's, or a row of 127's: lost)
                    batch = next(it)
                    assert batch.tokens.shape == sizes, (world, rank)
                    got += [(t.tobytes(), g.tobytes(), p.tobytes()) for t, g, p in
                            zip(batch.tokens, batch.segment_ids, batch.sources, strict=True)]
                own = it.state_dict()["row"]  # the last batch's rows of the rank's own window
            expected = [row for r in begun[rank::world] for row in going_on[r]]
            assert _ids(got[: len(got) - own]) == _ids(expected), (world, rank)


@pytest.mark.parametrize(("field", "value"), [("served", [2, 0, 0]), ("left", [0, None, 0])])
def test_a_replay_whose_counts_are_not_its_old_rank_s_is_a_state_error(
    parts: dict[str, str], field: str, value: list[Any]
) -> None:
    """A dealt window's turns edited (its counts served, or its documents left of each part)
    so that they choose a part with none of the window left: one StateError naming the
    replay, at any entry (before, an AssertionError deep in the turns, or under ``-O`` the
    last part chosen)."""
    m = Mixture(parts, {"web": 0.6, "pq": 0.4, "js": 0.0})
    states = [rows(m, None, rank, 2, 1)[1] for rank in range(2)]
    (state,) = reshard(states, 1)
    replay = state["documents"]["replays"][0]
    replay[field] = [replay[field][k] if v is None else v for k, v in enumerate(value)]
    with pytest.raises(StateError, match=r"documents\.replays\[0\]: the best-fit window dealt"
                       ) as caught:  # fmt: skip
        rows(m, state, 0, 1, 3)
    assert caught.value.field == "documents.replays[0]"
