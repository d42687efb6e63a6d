"""What a packer needs of a running stream of token documents (``DocumentSource``), and the
runs of documents it hands them out in (``TokenRun``).

A packer (``Batches``, ``BestFitBatches``) never takes documents one by one: the stream hands
out the rest of a block's documents at once, their ids copied out of the block in one array
(as its units hold them, or in hand-out order), so that the packers' work is a few array
operations per batch or window, not Python per document. A run
knows the stream's mark before each of its documents (only the position in the block differs
between them), so a packer's state is the same as if it had read them one at a time.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, TypeAlias, TypeVar

import numpy as np

from openwebtext.stream.mixschema import MixMark, MixRun
from openwebtext.stream.schema import DocumentState, MixtureState, Packed
from openwebtext.stream.state import Mark, Stats

__all__ = ["AnyMark", "DocumentSource", "Packer", "Run", "RunParts", "TokenRun", "WindowAhead"]

#: A best-fit window an old rank had begun, as a resharded share hands it out first:
#: ``(documents, number, rows handed out, packings)`` (packings: under a schedule).
WindowAhead = tuple[int, int, int, tuple[Packed, ...]]

#: What a stream hands out a run as: ``TokenRun``'s ids, starts, lengths and start.
RunParts = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], int]


class TokenRun(NamedTuple):
    """Token documents handed out together, in stream order (``DocumentSource.next_run``).

    All of them lie in one block of one epoch. Their ids are copied out of the block's units
    as the units hold them (not in the order the documents are handed out): document ``j``
    is ``ids[starts[j]:starts[j] + lengths[j]]``.
    """

    ids: np.ndarray[Any, Any]
    starts: np.ndarray[Any, Any]
    """Where each document begins in ``ids`` (int64)."""
    lengths: np.ndarray[Any, Any]
    """Each document's ids (int64)."""
    start: int
    """Where the first document's ids begin in that document: 0, but for one cut across a
    resharded checkpoint of batches (its first ids were targets before)."""
    before: Mark
    """The stream's mark before the first document."""
    after: Mark
    """The stream's mark after the last document."""

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def epoch(self) -> int:
        """The epoch of the documents."""
        return self.after.epoch

    def mark_before(self, j: int) -> Mark:
        """The stream's mark before document ``j``: what ``mark()`` said just before it."""
        if j == 0:
            return self.before
        return self.after._replace(in_block=self.after.in_block - len(self.lengths) + j)

    def end_to_end(self) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The documents' ids one after another, and where each ends in them."""
        starts, lengths = self.starts, self.lengths
        ends = np.cumsum(lengths)
        if len(starts) and (starts[1:] == starts[:-1] + lengths[:-1]).all():  # in order
            return self.ids[starts[0] : starts[0] + (ends[-1] if len(ends) else 0)], ends
        bounds = zip(starts.tolist(), (starts + lengths).tolist(), strict=True)
        return np.concatenate([self.ids[:0], *[self.ids[a:b] for a, b in bounds]]), ends


#: A run of a corpus, or of a mixture (``mixschema.MixRun``: the same reading, marks per part).
Run: TypeAlias = "TokenRun | MixRun"
#: A corpus's mark, or a mixture's.
AnyMark: TypeAlias = "Mark | MixMark"


class DocumentSource(Protocol):
    """A running stream of token documents, as the packers read it (``DocumentIterator``, or
    ``MixtureIterator``)."""

    def next_run(self, in_order: bool = False) -> Run:
        """The next documents (``StopIteration`` at the end of the stream); with
        ``in_order``, their ids one after another in the order they go out."""
        ...

    def mark(self) -> AnyMark:
        """Where the stream is now, after the last document handed out."""
        ...

    def state(self, mark: Any = None) -> DocumentState | MixtureState:
        """The stream's state now, or at ``mark``, as its record."""
        ...

    def windows_ahead(self) -> list[WindowAhead]:
        """In a resharded epoch of best-fit batches: the windows old ranks had begun that
        this share hands out first, as ``(documents, number, rows handed out, packings)``."""
        ...

    @property
    def stats(self) -> Stats:
        """The stream's counts so far."""
        ...

    def close(self) -> None:
        """Stop the workers now."""
        ...


P = TypeVar("P", bound="Packer")


class Packer:
    """What every packer (``Batches``, ``BestFitBatches``) is besides its batches: the owner
    of its documents until it is closed, in ``with``. Closed, it has ended: ``next`` raises
    ``StopIteration`` (as a closed generator's), the batches it had made are not handed out."""

    _docs: DocumentSource
    _closed = False

    def close(self) -> None:
        """Stop the workers now: the batches end here. Safe to call twice."""
        self._closed = True
        self._docs.close()

    def __enter__(self: P) -> P:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
