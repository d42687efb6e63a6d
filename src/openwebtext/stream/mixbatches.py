"""``MixtureBatches``: the batches of a mixture (``Loader.batches`` of a ``Mixture``), whose
weights change between batches (``set_weights``), exactly.

A packer reads documents ahead of the batch it hands out (a run of up to 256, a best-fit
window): the mixture has chosen their parts already, by the old weights. A change made there
would apply where the read ahead happened to be, which a resumed run reaches at another batch.
So the change is made where the batches are: the iterator takes its state (before the first
document of the next batch), adds the change at that document (``MixtureState.changes``), and
goes on from that state, its documents read again. A run resumed from a state taken before
the change and changed at the same batch makes the very same state, hence the same batches;
a state taken after it holds the change. The cost is a restart of the workers: a change every
few hundred batches (DoReMi, Aioli) is nothing, one every batch is not what it is for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from openwebtext.codec import replace
from openwebtext.errors import StateError
from openwebtext.stream.batches import BatchIterator
from openwebtext.stream.mixture import Mixture
from openwebtext.stream.schema import BatchesState, Change, MixtureState
from openwebtext.stream.source import Closing, Packer
from openwebtext.stream.state import Stats
from openwebtext.stream.turns import not_own_next

__all__ = ["MixtureBatches"]

Item = TypeVar("Item")


class MixtureBatches(Closing, Generic[Item]):
    """A ``BatchIterator`` of a mixture's batches that can change its weights.

    Args:
        mixture: The mixture.
        open_from: Makes the packer of the mixture's documents that goes on from a state
            (None: from the start) and reads so many documents (None: all).
        start: The state to go on from (None: the start).
        take: Documents to read (``Options.take``; None: all).
        parse: A state of these batches parsed and checked (``batches_start``: the same
            sizes or schedule, packing and window), as ``Loader.batches`` checks it.
    """

    def __init__(
        self,
        mixture: Mixture,
        open_from: Callable[[BatchesState | None, int | None], BatchIterator[Item]],
        start: BatchesState | None = None,
        take: int | None = None,
        *,
        parse: Callable[[Any], BatchesState | None] = BatchesState.from_json,
    ) -> None:
        self.mixture = mixture
        self._open, self._parse = open_from, parse
        # Where ``take`` counts from: the documents the mixture had handed out at the start.
        self._take, self._first = take, 0 if start is None else _counted_from(start)
        self._batches = open_from(start, take)
        self._closed = False
        # ``next`` or ``set_weights``: one at a time (reentrant: a signal handler landing
        # between taking it and ``_inside`` said reads a whole state, never waits for itself)
        self._turn = threading.RLock()
        self._inside: int | None = None  # the thread in ``next`` (``not_own_next``)

    def set_weights(
        self, weights: Mapping[str, float], *, state: dict[str, Any] | None = None
    ) -> None:
        """New weights by part name (a part left out: 0), choosing from the first document
        that no batch handed out holds any of: a document cut across the next batch, and the
        rest of a best-fit window rows were handed out of, keep the old weights' choice. The
        proportions count from there. The change is in the state, so a resumed run applies it
        at the same document. The workers start again and read again what they had read
        ahead: call it every few hundred batches, not at every one. From another thread, it
        waits for the batch being made (the change applies from the next one).

        Args:
            weights: The new weights.
            state: Go on from this state of these batches instead of their own (``Ahead``:
                the state of the batch handed out last, before those made ahead), closed or
                not.

        Raises:
            ValueError: a name that is not a part's, or weights that are not valid; or the
                batches were closed (or ran out) and no ``state`` says where to go on from.
            StateError: ``state`` is not a state of this mixture's batches (of these sizes or
                schedule, packing and window).
        """
        not_own_next(self._inside, "set_weights()")
        with self._turn:  # (another thread inside ``next``: after its batch)
            self._set_weights(weights, state)

    def _set_weights(self, weights: Mapping[str, float], state: dict[str, Any] | None) -> None:
        if self._closed and state is None:
            raise ValueError("set_weights: the batches were closed, or ran out (pass the state "
                             "to go on from)")  # fmt: skip
        values = self.mixture.weights_of(weights, "set_weights")
        saved = self._parse(self._batches.state_dict() if state is None else state)
        assert saved is not None  # (a state, parsed)
        documents = saved.documents
        names = tuple(self.mixture.names)
        if not isinstance(documents, MixtureState) or documents.config.parts != names:
            parts = documents.config.parts if isinstance(documents, MixtureState) else "a corpus"
            raise StateError(f"set_weights: the state is of batches of {parts}, not of this "
                             f"mixture's {names}")  # fmt: skip
        at = documents.handed
        if saved.packing == "concat" and saved.cut:  # its document goes on (its first id: a target)
            at += 1
        elif saved.row and not documents.replays:  # the window under way (none dealt left:
            at += sum(saved.window_parts or ())  # a dealt one's are not the rank's turns)
        changes = _pending((*documents.changes, Change(at, values)), documents.handed)
        changed = replace(saved, documents=replace(documents, changes=changes))
        # ``take`` ends where it would have: its documents before the state are read.
        read = _counted_from(saved) - self._first
        take = None if self._take is None else max(0, self._take - read)
        batches = self._open(changed, take)  # (refused: these go on as they were)
        self._batches.close()
        self._batches, self._closed = batches, False

    def __iter__(self) -> MixtureBatches[Item]:
        return self

    def __next__(self) -> Item:
        not_own_next(self._inside, "next()")
        packer, me = self._batches, threading.get_ident()
        made: list[dict[str, Any]] = []
        try:  # (inside until the batch is out, as ``Packer.next_batch``)
            with self._turn:
                self._inside = me
                try:
                    batch = packer.next_batch(made) if isinstance(packer, Packer) else next(packer)
                except StopIteration:  # (ran out: closed, as ``close`` leaves them)
                    self._closed = True
                    raise
            return batch
        except BaseException as exc:  # (a signal's handler raised after the batch was made)
            if isinstance(packer, Packer):
                packer.put_back(made, exc)
            raise
        finally:
            if self._inside == me:
                self._inside = None

    def state_dict(self) -> dict[str, Any]:
        """Where the next batch starts: resume with ``Loader.batches(..., state=…)``."""
        not_own_next(self._inside, "state_dict()")
        with self._turn:
            return self._batches.state_dict()

    def start(self) -> MixtureBatches[Item]:
        """As ``BatchIterator.start``."""
        self._batches.start()
        return self

    @property
    def seq_len(self) -> int:
        """Ids a row of the next batch predicts (under a schedule, the next batch's)."""
        return int(self._batches.seq_len)  # type: ignore[attr-defined]

    @property
    def batch_size(self) -> int:
        """Rows of the next batch."""
        return int(self._batches.batch_size)  # type: ignore[attr-defined]

    @property
    def stats(self) -> Stats:
        """The documents' counts (read ahead included), and what packing did."""
        not_own_next(self._inside, "stats")
        with self._turn:
            return self._batches.stats

    def close(self) -> None:
        """Stop the workers now: the batches end here. Safe to call twice."""
        not_own_next(self._inside, "close()")
        self._closed = True
        self._batches.close()


def _pending(changes: tuple[Change, ...], handed: int) -> tuple[Change, ...]:
    """``changes`` (in order) without those a later one makes moot: a change applies at the
    rank's first own turn at or after its ``at`` (none before ``handed``, the documents the
    state had handed out), and every change due there is applied in order, each counting the
    proportions afresh; so only the last due at a position is ever in force. The state then
    holds one change a position at most, and never more than can still take effect, however
    often a loop calls ``set_weights`` (at every batch, the same best-fit window or cut
    document many times over). The library's states record changes in the order of their
    positions, and then the batches are the same as with them all; a change before one still
    pending (a state edited by hand) is the last word from its position on."""
    kept: list[Change] = []
    for change in changes:
        while kept and max(kept[-1].at, handed) >= max(change.at, handed):
            kept.pop()  # (due where this one is, or after it: never in force)
        kept.append(change)
    return tuple(kept)


def _counted_from(state: BatchesState) -> int:
    """Where the ``take`` of a run resumed from ``state`` counts from: the documents the
    mixture had handed out, and those of the document (concat, ids of it in batches) or the
    window (best fit, rows of it out) the next batch is inside, which the run that began
    them counted (``Loader.batches``)."""
    documents = state.documents
    assert isinstance(documents, MixtureState)  # (a mixture's batches)
    if state.packing == "concat":
        return documents.handed + (state.offset > 0)  # (as ``Loader.batches`` counts take)
    return documents.handed + (sum(state.window_parts or ()) if state.row else 0)
