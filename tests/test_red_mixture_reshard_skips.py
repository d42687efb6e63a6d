"""A mixture's best-fit batches resharded after skips (``on_error="skip"``), counted document by
document: part ``x`` (``test_red_bestfit_reshard_skips``' corpus, its bad documents placed by
the old shares) alone, or with a small clean part ``y``; ``epochs=1`` (the run ends when ``x``,
the last part to finish, has handed out its epoch: ``y`` goes on, repeated). The documents of
``x`` the old ranks handed out before their states and the new ranks after the reshard are its
epoch's, each kept document once (``even=None``; under ``drop``/``pad`` within what the stats
count as dropped or repeated), or the reshard is refused (``StateError``: a window an old rank
had begun that ran past its evened-out share after skips, into the pass repeating it), never a
silent loss.

Before the fix a part's window was dealt as its *documents* of the part's share (``window_parts``)
while its documents with skips among them lie in more slots: the reshard dealt a window short,
the new rank read the rest of it from the next window's slots (``a5`` never handed out, ``c5``
twice, ``even=None``); and a window that ran into the pass repeating an evened-out share was
dealt as one crossing into the next epoch (a repeat counted nowhere, the next epoch's first
document left out). Now the state says the slots (``window_slots``) and the reshard deals them
(``FitWindow.slots``), or refuses the window (``rest._refuse_part_window``).
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
from pathlib import Path
from typing import Any

import pytest

import test_red_bestfit_reshard_skips as grid
from openwebtext import Corpus, Loader, Mixture, StateError, reshard
from openwebtext.plan import share_losses
from support import check_once_under_even

#: Part ``y``'s files and documents (clean, small: it ends its epoch first on every rank).
YLINES = {"g": 3, "h": 4}
WORLDS = ((2, 1), (3, 2), (2, 3), (1, 2))
BADS = ("none", "share-start", "share-end", "many", "in-window")
STOPS = ((1, 2, 3), (3, 4, 1), (5, 2, 6), (6, 7, 5), (0, 9, 2))
REFUSED = "best-fit window runs past the end of its share"


def _y(root: Path) -> Corpus:
    folder = root / f"y-{sum(1 for _ in root.iterdir())}"
    folder.mkdir()
    for name, n in YLINES.items():
        lines = [json.dumps({"text": f"{name}{k} " + "y" * (3 + k)}) + "\n" for k in range(n)]
        (folder / f"{name}.jsonl").write_text("".join(lines))
    return Corpus.open(folder)


def _run(mixture: Mixture, case: grid.Case, rank: int, world: int, state: Any = None,
         at: int | None = None) -> tuple[list[list[str]], Any, Any]:  # fmt: skip
    """Every batch's documents to the end, the state after ``at`` batches, the stats."""
    on_error = "raise" if case.bad == "none" else "skip"
    loader = Loader(mixture, rank=rank, world_size=world, even=case.even, shuffle=False,
                    seed=grid.SEED, workers=0, on_error=on_error, tokenizer="bytes",
                    epochs=1)  # fmt: skip
    return grid._run(loader, case._replace(batch_size=1), state, at)  # (the grid's batches)


def _check(root: Path, case: grid.Case, stops: tuple[int, ...], two: bool) -> str:
    """The invariant for ``case``: "ok", or "refused" (a refusal the module's docstring
    allows)."""
    layout = grid._layout(root, case)
    mixture = Mixture({"x": layout.corpus, **({"y": _y(root)} if two else {})})
    handed, states, repeated, dropped = [], [], 0, 0
    for r in range(case.old):
        whole, _, _ = _run(mixture, case, r, case.old)
        stop = min(len(whole), stops[r % len(stops)])
        again, state, _ = _run(mixture, case, r, case.old, None, stop)
        assert again == whole
        handed += [d for batch in whole[:stop] for d in batch]
        states.append(state)
        part = state["documents"]["parts"]["x"]
        repeated += part["counters"].get("repeated_documents", 0)
        if case.old > 1 and case.even is not None:
            repeated -= share_losses(sum(layout.counts), r, case.old, case.even)[1]  # (pad's)
    try:
        new = reshard(states, case.new, even=case.even)
        for r, state in enumerate(new):
            whole, _, stats = _run(mixture, case, r, case.new, state)
            handed += [d for batch in whole for d in batch]
            repeated += stats.parts["x"].repeated_documents
            dropped += stats.parts["x"].dropped_documents
    except StateError as exc:
        assert REFUSED in str(exc) and case.even is not None and case.bad != "none", exc
        return "refused"
    got = collections.Counter(d for d in handed if d[0] in grid.LINES)
    check_once_under_even(grid._epoch(layout, case), got, case.even, dropped, repeated)
    return "ok"


def _grid(even: str | None) -> list[tuple[grid.Case, tuple[int, ...]]]:
    out = []
    for (old, new), bad, window, stops in itertools.product(WORLDS, BADS, (3, 5), STOPS):
        case = grid.Case(old, new, bad, False, even, 0, window, 1, 40 if window == 5 else 24, 8)
        out.append((case, stops))
    return out


@pytest.mark.parametrize("two", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["one-part", "two-parts"])  # (the heavy variant: the slow step)
@pytest.mark.parametrize("even", [  # (each ~7 s: the default step keeps pad, the slow all)
    pytest.param(None, marks=pytest.mark.slow), pytest.param("drop", marks=pytest.mark.slow), "pad"
])
def test_a_mixture_s_windows_resharded_after_skips(tmp_path: Path, even: str | None,
                                                   two: bool) -> None:  # fmt: skip
    """Every (world old -> new, bad documents, window, stops): each kept document of ``x``'s
    epoch once (within the stats), or the reshard refused; none refused without skips or
    under ``even=None``, most resharded."""
    logger = logging.getLogger("openwebtext")
    logger.setLevel(logging.ERROR)
    results: collections.Counter[str] = collections.Counter()
    try:
        for case, stops in _grid(even):
            try:
                results[_check(tmp_path, case, stops, two)] += 1
            except AssertionError as exc:
                raise AssertionError(f"{case} stops {stops}: {exc}") from exc
    finally:
        logger.setLevel(logging.NOTSET)
    assert results["ok"] >= 4 * results["refused"], results


def test_a_skip_inside_a_part_s_window(tmp_path: Path) -> None:
    """2 -> 1, ``even=None``, windows of 3: old rank 1's share begins ``c5, c6, d0, d1`` (``c6``
    skipped), its first window ``c5, d0, d1`` in 4 slots, two rows out. Before the fix the
    reshard dealt it as 3 slots: the new rank packed ``a5`` (old rank 0's, after the window)
    into it, and handed out ``c5`` again (``a5`` never)."""
    case = grid.Case(2, 1, "in-window", False, None, 0, 3, 1, 24, 8)
    assert _check(tmp_path, case, (1, 2, 3), False) == "ok"
    layout = grid._layout(tmp_path, case)
    state = _run(Mixture({"x": layout.corpus}), case, 1, 2, None, 2)[1]
    assert state["window_parts"] == [3] and state["window_slots"] == [4]
