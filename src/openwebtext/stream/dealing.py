"""What a best-fit share of a resharded epoch's rest left when it is resharded again: the
windows dealt to it or begun by it that it had not finished (``Window``), and the rest of its
share after them (``windows_left``); and the ids of a concat document its rank left out
(``applied_trim``). ``rest.Rest`` carries them into the next level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from openwebtext.errors import StateError
from openwebtext.stream.sections import Packed, WindowAt
from openwebtext.stream.spans import Span, count, drop_front, slice_spans

__all__ = ["RAN_INTO_LAP", "Window", "applied_trim", "heads", "windows_left"]

#: The refusal of a best-fit window that ran into the lap repeating its share (``Window.least``).
RAN_INTO_LAP = (
    "a best-fit window a share of the earlier reshard had begun runs past the end of its share "
    "into the lap repeating its documents after skips, which a reshard again does not follow "
    "(its documents would be lost): resume these states on their world size until that window "
    "is out, then reshard"
)


class Window(NamedTuple):
    """A best-fit window of documents some rank had begun handing the rows of."""

    spans: list[Span]
    """Its documents, as intervals of the rest sequence."""
    number: int
    """The number its rows were shuffled with."""
    skip: int
    """Its rows already handed out (in their shuffled order)."""
    packings: tuple[Packed, ...] = ()
    """Under a schedule: its packings rows were handed out of (the last's rows: ``skip``)."""
    least: int = 0
    """The documents of it handed out again that its slots here must hold (``windows_left``:
    fewer, and it ran into the lap repeating its share, which is refused)."""

    @property
    def documents(self) -> int:
        return count(self.spans)


def windows_left(
    windows: Sequence[Window],
    share: Sequence[Span],
    done: int,
    at_window: WindowAt,
    size: int,
) -> tuple[list[Window], list[Span]]:
    """What a best-fit share of an earlier reshard left (``Level``): the windows it had not
    finished (the one it was in,
    ``at_window``: its number, rows handed out and packings) and the spans of its sequence
    after them.

    The share's sequence is its ``windows``' documents, then ``share``; its state is at the
    start of the window it was in (``done`` documents before it): own windows are ``size``
    documents from the end of the dealt ones, each rank numbering its own.
    """
    number, row, packings = at_window.number, at_window.rows, at_window.packings
    if at_window.replays is not None:  # a mixture's part: the dealt windows left are said
        return _part_windows_left(windows, share, done, at_window)
    left: list[Window] = []
    at, inside = 0, False  # inside: the share was in one of the dealt windows
    for window in windows:
        n = window.documents
        if at == done and row > 0:  # the share's packings of it go on from the old rank's
            skip = row if packings else max(row, window.skip)
            left.append(window._replace(skip=skip, packings=packings))
            inside = True
        elif at >= done:
            left.append(window)
        elif at + n > done:
            raise StateError(f"bad batches state: {done} documents is inside a best-fit window")
        at += n
    if done < at or inside or (done == at and row == 0):
        return left, list(share)
    into = done - at
    total = count(share)
    if row > 0:  # (its own windows begin ``size`` slots apart, or later: the skipped slots
        m = min(size, total - into)  # a window's last block ends with are the window's)
        spans = slice_spans(share, into, into + m, repeat=False)
        again = at_window.repeats
        if again > sum(b - a for a, b, marked in spans if marked):
            raise StateError(RAN_INTO_LAP)
        # Its repeats fit its slots marked as repeats, unless some of those were skipped: the
        # rank it is dealt to checks it hands out as many of them (``RestHandOut``).
        least = again if m < size else 0
        left.append(Window(spans, number, row, packings, least))
        into += m
    return left, drop_front(share, into)


def _part_windows_left(
    windows: Sequence[Window], share: Sequence[Span], done: int, at_window: WindowAt
) -> tuple[list[Window], list[Span]]:
    """``windows_left`` for a mixture's part: the share was in the first of the last
    ``at_window.replays`` windows dealt to it, or past them in a window of its own holding
    ``at_window.documents`` of the part (a window may hold none of a part's documents: its
    count cannot say which window the share was in, the mixture's state says it)."""
    k, row, packings = at_window.replays or 0, at_window.rows, at_window.packings
    finished = sum(w.documents for w in windows[: len(windows) - k])
    if (done != finished) if k else (done < finished):
        raise StateError(f"bad batches state: {done} documents is inside a best-fit window")
    left = list(windows[len(windows) - k :])
    if left and row > 0:  # its packings of the first go on from the old rank's
        skip = row if packings else max(row, left[0].skip)
        left[0] = left[0]._replace(skip=skip, packings=packings)
    if k:
        return left, list(share)
    into = done - finished
    if row > 0:
        m = at_window.dealt or 0  # (its slots: its documents and those skipped among them)
        if into + m > count(share) or at_window.across.ends:
            raise StateError(
                f"a best-fit window holds {m} documents of a share of this epoch that had "
                f"{count(share) - into} left: it crosses the epoch's end, which a state resharded "
                "again does not follow; resume on the same world size, or reshard when no "
                "window does"
            )
        left.append(Window(slice_spans(share, into, into + m, repeat=False), at_window.number,
                           row, packings))  # fmt: skip
        into += m
    return left, drop_front(share, into)


def applied_trim(
    mid: Mapping[int, int], share: Sequence[Span], done: int, x: int, repeat: bool, leads: bool,
    gapped: Mapping[int, int], skipped: bool = False,
) -> int:  # fmt: skip
    """The ids of document ``x`` its rank left out when it handed it out (``Rest.leads``;
    ``gapped``: ``Rest.gapped``; ``skipped``: the share's slots before the one the rank's cut is
    in all held documents skipped for their content, its state's ``cut_slots``: that document
    was its first, ``RestHandOut._leads_with``)."""
    if repeat:
        return 0
    if share and (skipped or heads(gapped, share[0][0], x)) and done == 0 and leads:
        return max(mid.get(x, 0) - 1, 0)
    return mid.get(x, 0)


def heads(gapped: Mapping[int, int], first: int, x: int) -> bool:
    """Slot ``x`` holds the first document of a share whose first slot is ``first``: it is
    that slot, or a cut's document past slots of skipped ones the share begins among
    (``Rest.gapped``)."""
    return x == first or gapped.get(x, x) <= first < x
