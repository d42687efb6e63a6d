"""Where a pass repeating an evened-out share's documents after skips ends, as a state says it
(``position.pass_end``): checked against the share where the state enters
(``epochs.check_resumed``).

Such a pass ends where the documents still due meet the share's slots counted from where it
began (``plan.pass_end``); the documents handed out since are fewer than the slots passed (the
skips), so the end cannot be found from a position inside the pass: the state says it, and
``epochs.EvenEpoch`` resumes the pass to it, its blocks cut as the run cut them.
"""

from __future__ import annotations

from collections.abc import Sequence

from openwebtext.errors import StateError
from openwebtext.plan import even_end, pass_end
from openwebtext.stream.schema import DocumentState

__all__ = ["check_pass_end"]


def check_pass_end(
    counts: Sequence[int], size: int, target: int | None, state: DocumentState
) -> None:
    """Check a state's ``position.pass_end`` against its share (``counts``: documents per plan
    position; ``size``: a block's least; ``target``: its even target, or None): there inside a
    pass repeating documents after skips, past its start (``EvenEpoch``), and only there (or at
    the first one's start, where a pass from there ends); the
    pass never crossing the end of the lap its position is in, nor past where the documents the
    epoch still hands out would end it (the documents handed out since the pass began are at
    most the slots passed; none left: the epoch is done, its pass's end not read), nor before
    where they would end it from the earliest start the pass can have (the documents due at
    its start are at least those due now); and the block the position is in holding
    ``in_block`` documents, cut at the pass's end.

    Raises:
        StateError: naming ``position.pass_end``.
    """
    at, counters = state.position, state.counters
    end, n, handed = at.pass_end, len(counts), counters.epoch_documents
    repeats = 0 if target is None else even_end(counts, target)
    repeating = target is not None and n > 0 and counters.skips > 0
    inside = repeating and (at.block, at.in_block) > (repeats, 0)
    whose = f"the share's passes that repeat begin at plan position {repeats}"
    if not isinstance(end, int):
        if inside:
            raise StateError(f"bad state: position.pass_end: missing: block={at.block}, in_block="
                             f"{at.in_block} is inside a pass repeating documents after skips, "
                             f"whose end only the state says ({whose})", "position.pass_end")
        return
    # (at the first pass's start, a state taken before its first document (best fit's window
    # start) may say its end: then where a pass from there ends, ``least`` and ``most`` below)
    if not (inside or (repeating and (at.block, at.in_block) == (repeats, 0))) or target is None:
        raise StateError(f"bad state: position.pass_end: is {end}, but block={at.block}, in_block="
                         f"{at.in_block} is inside no pass repeating documents after skips "
                         f"({whose})", "position.pass_end")  # fmt: skip
    lap, due = at.block // n * n, target - handed + at.in_block
    least, most = end, lap + n  # (the epoch's documents all out: nothing more is read)
    if handed < target:  # the pass began at or after the repeats' and its lap's start
        most = min(most, pass_end(counts, at.block, due))
        least = end if end == at.block else pass_end(counts, max(repeats, lap), due)
    if end < least:
        raise StateError(f"bad state: position.pass_end: is {end}, but a pass through block="
                         f"{at.block}, in_block={at.in_block} that began at plan position "
                         f"{max(repeats, lap)} or later ends at {least} at least (where the "
                         f"{target - handed} documents still due end it)", "position.pass_end")
    docs, q = 0, at.block  # the block at the position, cut at the pass's end
    while q < end and docs < size:
        docs, q = docs + counts[q % n], q + 1
    if end > most:
        raise StateError(f"bad state: position.pass_end: is {end}, but a pass through block="
                         f"{at.block}, in_block={at.in_block} ends at {most} at most (the end of "
                         f"its lap, or where the {target - handed} documents still due end it)",
                         "position.pass_end")  # fmt: skip
    if at.in_block > docs:
        raise StateError(f"bad state: position.pass_end: is {end}, which cuts the block at "
                         f"block={at.block} to {docs} documents, fewer than in_block="
                         f"{at.in_block}", "position.pass_end")  # fmt: skip
