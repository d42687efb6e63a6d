"""Best-fit batches of a mixture whose small part's ranks are in different epochs of it,
resharded: each old rank's window is dealt to one new rank, which hands out first the very
rows the old rank would have (its documents of the small part read from that rank's epoch),
and over old and new ranks every id of every document is handed out equally often."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, Mixture, reshard
from tables_support import sample_texts, write_jsonl, write_parquet

S, WINDOW, SEED = 127, 5, 6
STOPS = (2, 0, 9, 37)  # batches (of one row) each of 4 old ranks hands out


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory) -> Mixture:
    """50 parquet rows and 30 JSON lines (a share of 7 or 8 a rank of 4: rank 3 is in a
    later epoch of it than the others when it stops)."""
    folder = tmp_path_factory.mktemp("bfe")
    write_parquet(folder / "pq" / "a.parquet", sample_texts(50, seed=1))
    write_jsonl(folder / "js" / "a.jsonl", sample_texts(30, seed=2))
    return Mixture({"pq": str(folder / "pq"), "js": str(folder / "js")})


def _batches(m: Mixture, state: Any, rank: int, world: int, n: int, whole: bool = False,
             workers: int = 0) -> tuple[list[tuple[Any, ...]], Any]:  # fmt: skip
    """``n`` rows (ids, segment ids, positions), or on to the end of the window and of every
    dealt window (``whole``), and the state after them."""
    loader = Loader(m, workers=workers, seed=SEED, tokenizer="bytes", epochs=None, even=None,
                    rank=rank, world_size=world)  # fmt: skip
    out = []
    with loader.batches(S, 1, packing="bestfit", window=WINDOW, segments=True,
                        state=state) as it:  # fmt: skip
        while len(out) < n or (
            whole and (it.state_dict()["row"] or it.state_dict()["documents"].get("replays"))
        ):
            batch = next(it)
            out.append((batch.tokens[0].copy(), batch.segment_ids[0].copy(),
                        batch.positions[0].copy()))  # fmt: skip
        return out, json.loads(json.dumps(it.state_dict()))


def test_windows_of_a_part_s_different_epochs_are_dealt_and_packed_as_before(
    mixture: Mixture,
) -> None:
    old = [_batches(mixture, None, r, 4, n) for r, n in enumerate(STOPS)]
    states = [state for _, state in old]
    epochs = [s["documents"]["parts"]["js"]["position"]["epoch"] for s in states]
    assert len(set(epochs)) > 1, epochs  # (else this tests nothing new)
    # What each old rank would have handed out of its window, in the order they are dealt.
    expected = {r: _batches(mixture, s, r, 4, 0, whole=True)[0]
                for r, s in enumerate(states) if s["row"]}  # fmt: skip
    new = reshard(states, 3)
    handed: list[tuple[Any, ...]] = [row for rows, _ in old for row in rows]
    for rank, state in enumerate(new):
        dealt = [r for k, r in enumerate(sorted(expected)) if k % 3 == rank]
        want = [row for r in dealt for row in expected[r]]
        got, _ = _batches(mixture, state, rank, 3, 40, whole=True)
        assert len(got) >= len(want)
        for a, b in zip(got, want, strict=False):  # (then its own rows)
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        handed += got
    # Every id of every document handed out equally often (old ranks' rows, then new).
    texts = {}
    with Loader(mixture, workers=0, tokenizer="bytes", epochs=1).iter() as it:
        for doc in it:
            texts[(doc.source, doc.name)] = np.asarray(doc.tokens)
    cover = {key: np.zeros(len(ids), int) for key, ids in texts.items()}
    for tokens, segments, positions in handed:
        for s in set(segments[segments > 0].tolist()):
            at = np.flatnonzero(segments == s)
            p, ids = int(positions[at[0]]), tokens[at]
            (key,) = [k for k, t in texts.items() if np.array_equal(t[p : p + len(ids)], ids)]
            cover[key][p : p + len(ids)] += 1
    uneven = [key for key, c in cover.items() if c.min() != c.max()]
    assert not uneven, uneven


@pytest.mark.parametrize("workers", [0, 2])
def test_a_state_inside_the_dealt_windows_of_later_epochs_resumes_exactly(
    mixture: Mixture, workers: int
) -> None:
    states = [_batches(mixture, None, r, 4, n)[1] for r, n in enumerate(STOPS)]
    state = reshard(states, 1)[0]  # every window dealt to it, of epochs 0 and 1 of js
    whole, _ = _batches(mixture, state, 0, 1, 16)
    for cut in (1, 4, 7, 11):
        first, saved = _batches(mixture, state, 0, 1, cut, workers=workers)
        rest, _ = _batches(mixture, saved, 0, 1, 16 - cut, workers=workers)
        for a, b in zip(first + rest, whole, strict=True):
            assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), cut
