"""Best-fit batches resharded twice after skips (``on_error="skip"``), evened out: old ranks
stopped, resharded, the new ranks run partway and their states resharded again, run to the end.
Every kept document of the epoch is handed out once, within what the stats count as dropped or
repeated (the oracle of ``test_red_bestfit_reshard_skips``: the old shares' slots less the
skipped documents), or the second reshard is refused with a message, never a silent loss.

Before the fix a state a new rank made after skips was refused when resharded again (``StateError:
bad batches state: 6 documents is inside a best-fit window``): its own windows were taken to
begin ``window`` slots apart, but a window whose last block ends with skipped documents holds
their slots too, and the next one begins after them. And a window of a new rank that ran past
its share's slots into the lap repeating its share (``stream/resthandout.py``) was refused only
when its repeats outnumbered its slots marked as repeats (``pad``'s): with one of those skipped,
its lap's document was left out of the window packed again and its rows differed (refused now
by the rank it is dealt to, ``Window.least``).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from openwebtext import StateError, reshard
from support import check_once_under_even
from test_red_bestfit_reshard_skips import Case, Layout, _epoch, _layout, _loader, _repeats, _run

#: The lap refusal's words (``dealing.RAN_INTO_LAP``).
INTO_LAP = "runs past the end of its share into the lap repeating its documents after skips"


def _twice(layout: Layout, case: Case, stops: tuple[tuple[int, ...], tuple[int, ...]],
           world: int) -> tuple[list[Any], list[str], int, int]:  # fmt: skip
    """The old ranks stopped after ``stops[0]`` batches each, resharded to ``case.new`` ranks
    stopped after ``stops[1]``: their states, the documents handed out before them, and what
    those states count as dropped and repeated."""
    handed, states, repeated = [], [], 0
    for r in range(case.old):
        loader = _loader(layout, case, r, case.old)
        whole, _, _ = _run(loader, case)
        stop = min(len(whole), stops[0][r])
        again, state, _ = _run(loader, case, None, stop)
        assert again == whole
        handed += [d for batch in whole[:stop] for d in batch]
        states.append(state)
        repeated += _repeats(case, layout, state, r)
    middles, dropped = [], 0
    for r, state in enumerate(reshard(states, case.new, even=case.even)):
        loader = _loader(layout, case, r, case.new)
        whole, _, _ = _run(loader, case, state)
        stop = min(len(whole), stops[1][r])
        again, middle, _ = _run(loader, case, state, stop)
        assert again == whole
        handed += [d for batch in whole[:stop] for d in batch]
        middles.append(middle)
        counted = middle["documents"]["counters"]
        repeated += counted.get("repeated_documents", 0)
        dropped += counted.get("dropped_documents", 0)
    assert middles[-1]["documents"]["reshard"].get("counted", True)  # (its drop counted)
    assert reshard(middles, world, even=case.even)  # (nothing read: the rests are cut on start)
    return middles, handed, dropped, repeated


def _hand_out(layout: Layout, case: Case, states: list[Any]) -> tuple[list[str], Any]:
    """The documents the ranks of ``states`` hand out to the end, and their summed stats."""
    out, dropped, repeated = [], 0, 0
    for r, state in enumerate(states):
        loader = _loader(layout, case, r, len(states))
        whole, _, stats = _run(loader, case, state)
        out += [d for batch in whole for d in batch]
        dropped, repeated = dropped + stats.dropped_documents, repeated + stats.repeated_documents
    return out, (dropped, repeated)


TWICE = [  # (case, stops of the old and new ranks, the world resharded to again)
    (Case(3, 2, "share-start", False, "drop", 0, 5, 1, 40, 8), ((3, 1, 0), (2, 3)), 3),
    (Case(3, 2, "many", False, "pad", 0, 3, 1, 24, 8), ((3, 1, 0), (1, 6)), 3),
    (Case(2, 3, "share-end", False, "pad", 0, 3, 1, 24, 8), ((1, 2), (2, 3, 4)), 2),
    (Case(3, 2, "in-window", False, "drop", 0, 5, 1, 40, 8), ((3, 1, 0), (4, 3)), 3),
]


@pytest.mark.parametrize(("case", "stops", "world"), TWICE)
def test_resharded_twice_hands_out_the_epoch_once(
    tmp_path: Path, case: Case, stops: tuple[tuple[int, ...], tuple[int, ...]], world: int
) -> None:
    """A new rank's own window begun after a block ending with skipped documents (its slots
    the window's): its state resharded again resumes, each kept document once."""
    layout = _layout(tmp_path, case)
    middles, handed, dropped, repeated = _twice(layout, case, stops, world)
    out, (more_dropped, more_repeated) = _hand_out(layout, case, reshard(middles, world,
                                                                         even=case.even))
    check_once_under_even(_epoch(layout, case), collections.Counter(handed + out), case.even,
                          dropped + more_dropped, repeated + more_repeated)  # fmt: skip


def _refused(layout: Layout, case: Case, states: list[Any]) -> str:
    """The refusal of the first rank of ``states`` that refuses to hand its share out."""
    for r, state in enumerate(states):
        try:
            _run(_loader(layout, case, r, len(states)), case, state)
        except StateError as exc:
            return str(exc)
    raise AssertionError("no rank refused its share")


def test_a_window_into_its_lap_resharded_again_is_refused(tmp_path: Path) -> None:
    """2 -> 3 -> 2 under ``drop``: new rank 2's share is short of its slots by the skips in it
    and its last window, begun, runs into the lap repeating its share (its state says its
    repeats, none of its slots marked as repeats): refused where the window is dealt, before a
    row of it, as the state resumed on its own world size hands it out in full."""
    case = Case(2, 3, "share-end", False, "drop", 0, 3, 1, 24, 8)
    layout = _layout(tmp_path, case)
    middles, _, _, _ = _twice(layout, case, ((3, 1), (1, 6, 2)), 2)
    (lap,) = [s for s in middles if s.get("window_repeats")]
    assert lap["row"] > 0
    assert INTO_LAP in _refused(layout, case, reshard(middles, 2, even=case.even))


def test_pad_and_lap_repeats_in_one_window_are_refused(tmp_path: Path) -> None:
    """2 -> 3 -> 2 under ``pad``: new rank 2's last window, begun, holds ``pad``'s repeat
    ``a5`` of its share's slots, a skipped document's slot marked as a repeat too, and ``e5``
    of the lap repeating its share: 2 repeats, as many as its slots marked as repeats. Before
    the fix it was dealt as its share's slots (``a5`` alone, its rows out: ``e5`` never packed
    again); now the rank it is dealt to counts 1 repeat in them and refuses it."""
    case = Case(2, 3, "many", False, "pad", 0, 3, 1, 24, 8)
    layout = _layout(tmp_path, case)
    middles, _, _, _ = _twice(layout, case, ((1, 2), (4, 3, 5)), 2)
    assert [s.get("window_repeats") for s in middles] == [None, None, 2]
    said = _refused(layout, case, reshard(middles, 2, even=case.even))
    assert INTO_LAP in said and "(2 of its documents were handed out again, 1 of" in said, said
    # Resumed on their own world size, the new ranks hand out that window in full.
    rank_2 = _loader(layout, case, 2, 3)
    whole, _, _ = _run(rank_2, case, middles[2])
    assert whole[:1] == [["e5"]], whole
