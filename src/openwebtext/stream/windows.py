"""The records of best fit's windows (``packing.BestFitBatches``): one being read
(``Reading``: its documents so far, in document slots, packed once whole) and one packed with
rows not handed out (``Window``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from openwebtext.stream.fitting import Rows
from openwebtext.stream.sections import Packed
from openwebtext.stream.source import AnyMark, Run

__all__ = ["Reading", "Window"]


@dataclass
class Reading:
    """A window of documents being read (``BestFitBatches``), packed once whole."""

    mark: AnyMark
    """Where the stream was before its first document."""
    parts: list[tuple[Run, int, int]]
    """Its documents: ``(run, first, end)``, documents first..end of each run."""
    documents: int
    count: int
    """Ids read into it."""
    epoch: int | None
    """Of its documents (None: none read yet)."""
    size: int
    """Document slots it holds when whole."""
    slots: int = 0
    """Document slots read into it: its documents, and those skipped for their content among
    and after them (``source.slots_at``; a mixture's: its documents)."""
    first: int | None = None
    """The slot it begins at (None: a mixture's, counted in documents)."""


@dataclass
class Window:
    """A packed window with rows not handed out (``BestFitBatches``)."""

    mark: AnyMark
    """Where the stream was before its first document."""
    number: int
    """The own window number a state at it says (and its epoch)."""
    epoch: int
    fitted: Rows
    row: int
    """The next row to hand out (of the window's rows, in their seeded order)."""
    made: tuple[np.ndarray[Any, Any], ...] = ()
    """Rows made ahead (tokens, and with segments their segment ids and positions)..."""
    made_from: int = 0
    """... from this row ..."""
    made_to: int = 0
    """... to this one."""
    parts: list[tuple[Run, int, int]] | None = None
    """Its documents (as ``Reading.parts``), to pack it afresh at another length."""
    cap: int = 0
    """Ids of its rows."""
    packings: tuple[Packed, ...] = ()
    """Its earlier packings rows were handed out of (packed again at changes of length)."""
    seeded_by: tuple[int, int] = (0, 0)
    """The epoch and number its rows' order is seeded by (a dealt window's: the old rank's)."""
    short: int = 0
    """Its document slots, where the stream ended before it was whole (0: it was)."""
