"""One resume checker for everything that has a state (after torchdata's
``run_test_save_load_state``, test/nodes/utils.py).

A subject is a function ``start(state, epochs)`` that starts a running thing —
an iterator with ``state_dict()`` and ``close()`` — from a saved state (or
None), reading ``epochs`` epochs. ``check_save_load`` cuts it at many points,
at an epoch's end, restores it to the start, runs a second epoch and resumes
twice in a row, and compares everything with an uninterrupted run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol


class Running(Protocol):
    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


Start = Callable[[dict[str, Any] | None, int], Running]


def run(
    start: Start,
    state: dict[str, Any] | None,
    epochs: int,
    n: int | None = None,
    key: Callable[[Any], Any] = lambda item: item,
) -> tuple[list[Any], dict[str, Any]]:
    """Up to ``n`` items (all: None) of ``start(state, epochs)``, as ``key`` sees them, and the
    state after the last one, through JSON as a checkpoint file would carry it."""
    running = start(state, epochs)
    items: list[Any] = []
    try:
        if n != 0:
            for item in running:
                items.append(key(item))
                if len(items) == n:
                    break
        return items, json.loads(json.dumps(running.state_dict()))
    finally:
        running.close()


def without_units(state: Any) -> Any:
    """A state without its count of units read: a resumed run re-reads its cut block's."""
    if isinstance(state, dict):
        return {k: without_units(v) for k, v in state.items() if k != "units"}
    return state


def default_cuts(first: int, whole: int) -> list[int]:
    """Cut points: the start, a few in each epoch, and around the end of the first epoch."""
    points = {0, 1, 2, first // 3, first // 2, first - 1, first, first + 1}
    points |= {(first + whole) // 2, whole - 1, whole}
    return sorted(p for p in points if 0 <= p <= whole)


def check_save_load(
    start: Start,
    *,
    key: Callable[[Any], Any] = lambda item: item,
    resumed: Start | None = None,
    cuts: Callable[[int, int], Iterable[int]] = default_cuts,
) -> list[Any]:
    """Check that ``start`` resumes exactly from any state it gives; return the 2-epoch run.

    Args:
        start: The subject (see the module docstring).
        key: What of an item to compare (e.g. a document's name, a batch as a list).
        resumed: How to start from a saved state (default ``start``): e.g. with
            another worker count.
        cuts: ``(items in epoch 0, items in 2 epochs) -> cut points``.
    """
    again = resumed or start

    def span(state: dict[str, Any] | None, epochs: int, n: int | None = None) -> Any:
        return run(again if state is not None else start, state, epochs, n, key)

    # The reference: one epoch, and two epochs without a break.
    initial = start(None, 1)
    initial_state = json.loads(json.dumps(initial.state_dict()))
    initial.close()
    first, end_state = span(None, 1)
    whole, whole_state = span(None, 2)
    assert first, "the subject yields nothing"
    assert len(whole) > len(first), "the second epoch yields nothing"
    assert whole[: len(first)] == first, "epochs=2 changed the first epoch"

    # Restored to the start: the first epoch again.
    assert span(initial_state, 1)[0] == first, "restoring the initial state"

    # A finished state: nothing more with 1 epoch, the second epoch with 2.
    rest, state = span(end_state, 1)
    assert rest == [], "a finished state yielded more with the same epochs"
    assert without_units(state) == without_units(end_state)
    rest, state = span(end_state, 2)
    assert first + rest == whole, "a finished state resumed with more epochs"
    assert without_units(state) == without_units(whole_state)

    # Cut anywhere, resume, cut again, resume again: the same items and the same final state.
    for cut in cuts(len(first), len(whole)):
        head, state = span(None, 2, cut)
        assert head == whole[:cut], f"the first {cut} items"
        second_cut = (len(whole) - cut) // 2 or None
        middle, state = span(state, 2, second_cut)
        rest, state = span(state, 2)
        assert head + middle + rest == whole, f"resumed at {cut}, then after {len(middle)} more"
        final, want = without_units(state), without_units(whole_state)
        assert final == want, f"final state, cut {cut}: {final} != {want}"
    return whole
