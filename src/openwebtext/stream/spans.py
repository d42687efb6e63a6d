"""Intervals of a resharded epoch's rest sequence (``Span``: ``(start, stop, repeat)``), and
how a sequence of them is cut into even shares (``cut_share``), sliced and dropped from; the
part of a block a piece of it takes (``block_part``)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Span", "block_part", "count", "cut_share", "drop_front", "owner_of", "slice_spans"]

#: An interval of the rest sequence: ``(start, stop, repeat)``.
Span = tuple[int, int, bool]


def count(spans: Sequence[Span]) -> int:
    """The documents ``spans`` hold."""
    return sum(stop - start for start, stop, _ in spans)


def cut_share(
    spans: Sequence[Span], share: int, world: int, rule: str | None
) -> tuple[list[Span], int]:
    """The spans of rank ``share`` of ``world`` when ``spans`` (a sequence) is cut evenly, and
    how many documents ``drop`` leaves out (0 otherwise).

    ``drop``: every share ``len // world``; ``pad``: ``ceil(len / world)``, going round to the
    start (marked repeats); None: shares differ by at most one.
    """
    total = count(spans)
    if rule == "pad":
        q = -(-total // world)
        first, dropped = share * q, 0
    elif rule == "drop":
        q = total // world
        first, dropped = share * q, total - q * world
    else:
        q = total // world + (1 if share < total % world else 0)
        first = share * (total // world) + min(share, total % world)
        dropped = 0
    out: list[Span] = []
    at = first
    while q > 0 and total > 0:
        lap, within = divmod(at, total)
        took = slice_spans(spans, within, min(total, within + q), repeat=lap > 0)
        out += took
        n = count(took)
        q -= n
        at += n
    return out, dropped


def slice_spans(spans: Sequence[Span], start: int, stop: int, *, repeat: bool) -> list[Span]:
    """Positions ``start..stop`` of the sequence that ``spans`` make, as spans."""
    out: list[Span] = []
    at = 0
    for a, b, was_repeat in spans:
        lo, hi = max(a, a + start - at), min(b, a + stop - at)
        if lo < hi:
            out.append((lo, hi, was_repeat or repeat))
        at += b - a
        if at >= stop:
            break
    return out


def drop_front(spans: Sequence[Span], k: int) -> list[Span]:
    out: list[Span] = []
    for a, b, repeat in spans:
        if k >= b - a:
            k -= b - a
            continue
        out.append((a + k, b, repeat))
        k = 0
    return out


def owner_of(starts: Sequence[int], index: int) -> int:
    """Whose of consecutive intervals starting at ``starts`` (ascending) holds ``index``: the
    old rank whose remaining documents hold rest index ``index``."""
    lo, hi = 0, len(starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= index:
            lo = mid
        else:
            hi = mid - 1
    return lo


def block_part(slots: int, kept: int, first: int, left: int | None) -> tuple[int, int]:
    """What a pass from position ``first`` of a block of ``slots`` document slots, ``kept`` of
    them kept (handed out first, the skipped ones' slots after them), takes of it with ``left``
    slots to go (None: no bound, whole units): ``(last, out)``, the slot it ends at and the
    position its hand-out ends at; the slots between are skipped documents'."""
    if left is None:
        return slots, kept
    last = min(slots, first + left)
    return last, min(last, kept)
