"""Best-fit batches of a mixture whose small part's ranks are in different epochs of it, or
whose windows cross its epoch's end, resharded: each old rank's window is dealt to one new
rank, which hands out first the very rows the old rank would have (its documents of the small
part read from that rank's epoch, and past its end from the next), and over old and new ranks
every id of every document is handed out equally often."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from openwebtext import Loader, Mixture, reshard
from openwebtext.stream import rest
from tables_support import sample_texts, write_jsonl, write_parquet

S, WINDOW = 127, 5


class Case(NamedTuple):
    mixture: Mixture
    seed: int
    stops: tuple[int, ...]  # batches (of one row) each old rank hands out


@pytest.fixture(scope="module", params=["epochs", "crossing"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    """50 parquet rows and 30 JSON lines, where rank 3 of 4 stops in a later epoch of the
    JSON part than the others ("epochs"); or 7 JSON lines, a share of 1 or 2 a rank, so that
    every window of 5 documents holds some of the part's next epoch ("crossing")."""
    folder = tmp_path_factory.mktemp("bfe")
    small = 30 if request.param == "epochs" else 7
    write_parquet(folder / "pq" / "a.parquet", sample_texts(50, seed=1))
    write_jsonl(folder / "js" / "a.jsonl", sample_texts(small, seed=2))
    m = Mixture({"pq": str(folder / "pq"), "js": str(folder / "js")})
    return Case(m, 6, (2, 0, 9, 37)) if small == 30 else Case(m, 5, (1, 3, 1, 2))


def _batches(case: Case, state: Any, rank: int, world: int, n: int, whole: bool = False,
             workers: int = 0, window: int = WINDOW, on_error: str = "raise"
             ) -> tuple[list[tuple[Any, ...]], Any]:  # fmt: skip
    """``n`` rows (ids, segment ids, positions), or on to the end of the window and of every
    dealt window (``whole``), and the state after them."""
    loader = Loader(case.mixture, workers=workers, seed=case.seed, tokenizer="bytes",
                    epochs=None, even=None, rank=rank, world_size=world,
                    on_error=on_error)  # type: ignore[arg-type]  # fmt: skip
    out = []
    with loader.batches(S, 1, packing="bestfit", window=window, segments=True,
                        state=state) as it:  # fmt: skip
        while len(out) < n or (
            whole and (it.state_dict()["row"] or it.state_dict()["documents"].get("replays"))
        ):
            batch = next(it)
            out.append((batch.tokens[0].copy(), batch.segment_ids[0].copy(),
                        batch.positions[0].copy()))  # fmt: skip
        return out, json.loads(json.dumps(it.state_dict()))


def _uneven(m: Mixture, handed: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """The documents some ids of which the rows hold more often than others."""
    texts = {}
    with Loader(m, workers=0, tokenizer="bytes", epochs=1).iter() as it:
        for doc in it:
            texts[(doc.source, doc.name)] = np.asarray(doc.tokens)
    cover = {key: np.zeros(len(ids), int) for key, ids in texts.items()}
    for tokens, segments, positions in handed:
        for s in set(segments[segments > 0].tolist()):
            at = np.flatnonzero(segments == s)
            p, ids = int(positions[at[0]]), tokens[at]
            (key,) = [k for k, t in texts.items() if np.array_equal(t[p : p + len(ids)], ids)]
            cover[key][p : p + len(ids)] += 1
    return [key for key, c in cover.items() if c.min() != c.max()]


def _equal(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    return all(np.array_equal(x, y) for r, s in zip(a, b, strict=True)
               for x, y in zip(r, s, strict=True))  # fmt: skip


def test_dealt_windows_are_packed_as_before_and_every_id_handed_out_alike(case: Case) -> None:
    old = [_batches(case, None, r, 4, n) for r, n in enumerate(case.stops)]
    states = [state for _, state in old]
    epochs = {s["documents"]["parts"]["js"]["position"]["epoch"] for s in states}
    crossing = all(s["window_parts"][1] >= 2 for s in states if s["row"])
    assert len(epochs) > 1 or crossing  # (else this tests nothing new)
    # What each old rank would have handed out of its window, in the order they are dealt.
    expected = {r: _batches(case, s, r, 4, 0, whole=True)[0]
                for r, s in enumerate(states) if s["row"]}  # fmt: skip
    handed: list[tuple[Any, ...]] = [row for rows, _ in old for row in rows]
    for rank, state in enumerate(reshard(states, 3)):
        want = [row for k, r in enumerate(sorted(expected)) if k % 3 == rank for row in expected[r]]
        got, _ = _batches(case, state, rank, 3, 40, whole=True)
        assert _equal(got[: len(want)], want), rank
        handed += got
    assert not _uneven(case.mixture, handed)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_inside_the_dealt_windows_resumes_exactly(case: Case, workers: int) -> None:
    states = [_batches(case, None, r, 4, n)[1] for r, n in enumerate(case.stops)]
    state = reshard(states, 1)[0]  # every window dealt to it
    whole, _ = _batches(case, state, 0, 1, 16)
    for cut in (1, 4, 7, 11):
        first, saved = _batches(case, state, 0, 1, cut, workers=workers)
        rest, _ = _batches(case, saved, 0, 1, 16 - cut, workers=workers)
        assert _equal(first + rest, whole), cut


def test_resharded_again_inside_the_rest_every_id_is_handed_out_alike(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """3 ranks -> 2 -> 2 (stops a random search chose), the second reshard while the new
    ranks are in the rest, one inside a window dealt to it (a replay under way) and one in a
    window of its own: the windows not finished are dealt again (each part's share of them
    said by the mixture's replays, ``WindowAt.replays``), and over the three worlds every id
    of every document is handed out equally often. Before, refused ("not built")."""
    folder = tmp_path_factory.mktemp("again")
    write_parquet(folder / "pq" / "a.parquet", sample_texts(50, seed=1))
    write_jsonl(folder / "js" / "a.jsonl", sample_texts(30, seed=2))
    case = Case(Mixture({"pq": str(folder / "pq"), "js": str(folder / "js")}), 13, ())
    handed: list[tuple[Any, ...]] = []
    states: list[Any] = [None] * 3
    for k, stops in enumerate(((9, 14, 11), (4, 8), (34, 13))):
        last = k == 2
        runs = [_batches(case, states[r], r, len(stops), n, whole=last)
                for r, n in enumerate(stops)]  # fmt: skip
        handed += [row for rows, _ in runs for row in rows]
        if k == 1:
            again = [s for _, s in runs]
            assert any(s["documents"].get("replays") and s["row"] for s in again)
            assert any(not s["documents"].get("replays") and s["row"] for s in again)
        if not last:
            states = reshard([s for _, s in runs], (2, 2)[k])
    assert not _uneven(case.mixture, handed)


def test_windows_across_many_epochs_of_a_tiny_part_are_dealt_once_per_epoch(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part of 2 documents, 2 ranks, windows of 24: each old rank's window crosses a dozen
    epochs of the part. Resharded to 1, the dealt windows hand out the rows their old ranks
    would have, the epochs' rests built once each (before, each epoch's rest dealt every one
    after it again: 2^epochs rests, seconds at 24 documents a window, hours at 60)."""
    folder = tmp_path_factory.mktemp("tiny")
    write_parquet(folder / "pq" / "a.parquet", sample_texts(50, seed=1))
    write_jsonl(folder / "js" / "a.jsonl", sample_texts(2, seed=2))
    case = Case(Mixture({"pq": str(folder / "pq"), "js": str(folder / "js")}), 5, (1, 1))
    states = [_batches(case, None, r, 2, 1, window=24)[1] for r in range(2)]
    assert all(s["row"] and s["window_parts"][1] > 8 for s in states)  # (windows cross epochs)
    want = [row for r, s in enumerate(states)
            for row in _batches(case, s, r, 2, 0, whole=True, window=24)[0]]  # fmt: skip
    built: list[None] = []
    init = rest.Rest.__init__
    monkeypatch.setattr(rest.Rest, "__init__", lambda self, *a, **k: built.append(
        init(self, *a, **k)))  # fmt: skip
    (state,) = reshard(states, 1)
    got, _ = _batches(case, state, 0, 1, 0, whole=True, window=24)
    assert _equal(got[: len(want)], want)
    assert len(built) < 100, len(built)


@pytest.mark.parametrize("bad", ["a", "b"])
def test_windows_across_many_epochs_of_a_tiny_part_with_skips(
    tmp_path: Path, bad: str
) -> None:
    """The tiny part's units each hold a bad line (``{"text": 5}``, ``on_error="skip"``) after
    or before its documents: each old rank's window crosses several epochs of the part, each
    with a skipped slot. Its state says the epoch ends it crosses and its slots of the last
    (``window_next``); resharded to 1, the dealt windows hand out the rows their old ranks
    would have. Before, such a window was refused (``StateError``: it runs past its share after
    skips)."""
    folder = tmp_path
    write_parquet(folder / "pq" / "a.parquet", sample_texts(50, seed=1))
    (folder / "js").mkdir()
    lines = {"a": ["a0", "a1"], "b": ["b0", "b1"]}
    lines[bad] = [*lines[bad], "x"] if bad == "a" else ["x", *lines[bad]]
    for name, texts in lines.items():
        (folder / "js" / f"{name}.jsonl").write_text("".join(
            ('{"text": 5}' if t == "x" else json.dumps({"text": f"{t} tiny text"})) + "\n"
            for t in texts))  # fmt: skip
    mixture = Mixture({"pq": str(folder / "pq"), "js": str(folder / "js")})
    case = Case(mixture, 5, (1, 1))
    for n in (1, 7):
        states = [_batches(case, None, r, 2, n, window=24, on_error="skip")[1] for r in range(2)]
        assert all(s["window_next"][1]["ends"] > 2 for s in states)  # (across epochs)
        want = [row for r, s in enumerate(states)
                for row in _batches(case, s, r, 2, 0, whole=True, window=24,
                                    on_error="skip")[0]]  # fmt: skip
        (state,) = reshard(states, 1)
        got, _ = _batches(case, state, 0, 1, 0, whole=True, window=24, on_error="skip")
        assert _equal(got[: len(want)], want), n
