"""The running iterators a ``Loader`` makes: ``DocumentIterator`` over a corpus, ``MixtureIterator``
over a mixture. Each owns its stream's workers until it is closed, exhausted or dropped, and
hands out documents one by one (``next``) or, to a packer, in runs (``next_run``).

An iterator is read on one thread. Its ``state_dict()``, ``state()``, ``mark()`` and ``stats``
are read while no thread is inside its ``next`` (``Running._steady``): asked for on another
thread, they wait for the document being made, never reading a stream being changed.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

from openwebtext.index import Corpus
from openwebtext.options import Options
from openwebtext.stream import (
    DocumentState,
    Mark,
    MixedStream,
    MixMark,
    MixRun,
    Mixture,
    MixtureState,
    MixtureStats,
    Running,
    RunParts,
    Stats,
    Stream,
    TokenRun,
    WindowAhead,
    check_in_run,
    check_state,
    config_of,
    ensure_counts,
)
from openwebtext.tokenizer import Tokenizer, load_tokenizer

__all__ = ["DocumentIterator", "MixtureIterator"]


class DocumentIterator(Running[Stream]):
    """The running iterator of a ``Loader``: owns the workers until closed or exhausted.

    Args:
        corpus: The corpus to read.
        options: How to read it.
        state: A ``state_dict()`` of an earlier iterator of the same stream:
            continue right after the last document it handed out.
        as_tuples: Yield the reference API's ``((i, j), (member, name), text)``.
        tokenizer: ``options.tokenizer`` already loaded (else it is loaded here).
        _begun: ``state`` is a batches state's documents whose next document is in batches
            out (``Loader.batches``): one to read, so never a finished run's state
            (``check_in_run``'s ``begun``).

    Raises:
        StateError: ``state`` belongs to another corpus or other options.
        TokenizerError: ``options.tokenizer`` cannot be loaded.
    """

    def __init__(
        self,
        corpus: Corpus,
        options: Options,
        *,
        state: dict[str, Any] | DocumentState | None = None,
        as_tuples: bool = False,
        tokenizer: Tokenizer | None = None,
        _begun: bool = False,
    ) -> None:
        if tokenizer is None and options.tokenizer is not None:
            tokenizer = load_tokenizer(options.tokenizer)  # the one place a spec is resolved
        if state is not None:  # a state that does not fit is refused before any counting
            state = check_state(state, config_of(corpus, options, tokenizer))
            check_in_run(state, options, begun=_begun)
        # The rest of a resharded epoch is cut with the document counts, evened out or not.
        resharded = state is not None and state.reshard is not None
        corpus = ensure_counts(corpus, options, always=resharded)
        self.corpus = corpus
        self.options = options
        self.tokenizer: Tokenizer | None = tokenizer
        """The loaded ``options.tokenizer`` (None: the iterator hands out text)."""
        self._stream = Stream(corpus, options, tokenizer, state=state, as_tuples=as_tuples)
        self._gen = self._stream.documents()
        self._runs: Generator[RunParts, None, None] | None = None

    def next_run(self, in_order: bool = False) -> TokenRun:
        """The next token documents, the rest of a block at a time, their ids in one array
        (what the packers read: ``stream.DocumentSource``). An iterator hands out its documents
        either one by one or in runs: once ``next_run`` is called, ``next()`` is over.

        Args:
            in_order: Lay the ids out one document after another, in the order they go out
                (else as the block's units hold them: one copy less). The first call's
                choice holds for the iterator's life.

        Raises:
            StopIteration: the stream ended.
            ValueError: documents were taken one by one before, or the iterator has no
                tokenizer.
        """
        if self._runs is None:
            if self.tokenizer is None:
                raise ValueError("runs of token documents need a tokenizer")
            if inspect.getgeneratorstate(self._gen) != inspect.GEN_CREATED:
                raise ValueError("documents were taken one by one: runs cannot follow")
            self._gen.close()  # never started: its workers were never opened
            self._runs = self._stream.documents(runs="in order" if in_order else "units")
        before = self._stream.mark()
        ids, starts, lengths, start = next(self._runs)
        return TokenRun(ids, starts, lengths, start, before, self._stream.mark())

    def windows_ahead(self) -> list[WindowAhead]:
        """In a resharded epoch of best-fit batches: the windows old ranks had begun that this
        share hands out first, from here on, as ``(documents, number, rows handed out,
        packings)``."""
        return self._stream.windows_ahead()

    def close(self) -> None:
        """Stop the workers now. Safe to call twice; on the reading thread (``_end``)."""
        self._end(self._runs)
        self._stream.close()

    @property
    def stats(self) -> Stats:
        """Counts so far (including those carried over from a resumed state)."""
        return self._steady("stats", lambda: self._stream.stats)

    def state_dict(self, mark: Mark | None = None) -> dict[str, Any]:
        """The state after the last document handed out: resume with ``Loader.iter(state=…)``.

        Args:
            mark: A ``mark()`` taken earlier: the state as it was then.

        Raises:
            ValueError: ``mark`` is of an iterator of another run (a copy of one's own is not).
        """
        return self.state(mark).to_json()

    def state(self, mark: Mark | None = None) -> DocumentState:
        """``state_dict(mark)`` as its record (what a packer nests in its own state)."""
        if mark is None:
            mark = self._steady("state_dict()", self._stream.mark)
        _check_mark(mark, Mark)
        return self._stream.state(mark)

    def mark(self) -> Mark:
        """Where the iterator is, cheaply (e.g. before every document); see ``state_dict``."""
        return self._steady("mark()", self._stream.mark)


class MixtureIterator(Running[MixedStream]):
    """The running iterator of a ``Loader`` of a ``Mixture``: its documents in turn, each with
    ``Document.source`` the name of its part; ``set_weights`` between documents.

    Raises:
        StateError: ``state`` belongs to another mixture, a part's to another corpus or
            other options (the field names the part).
        TokenizerError: ``options.tokenizer`` cannot be loaded.
    """

    def __init__(
        self,
        mixture: Mixture,
        options: Options,
        *,
        state: dict[str, Any] | MixtureState | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        if tokenizer is None and options.tokenizer is not None:
            tokenizer = load_tokenizer(options.tokenizer)
        self.mixture = mixture
        self.options = options
        self.tokenizer = tokenizer
        self._stream = MixedStream(mixture, options, tokenizer, state=state)
        self._gen = self._stream.documents()

    def set_weights(self, weights: dict[str, float]) -> None:
        """New weights from the next document on, by part name (a part left out: 0). The
        proportions count from here; the change is in the state, so a resume replays it.

        Raises:
            ValueError: the weights are not valid, or the iterator was closed or ran out.
        """
        if inspect.getgeneratorstate(self._gen) == inspect.GEN_CLOSED:
            raise ValueError("set_weights: the iterator was closed, or ran out")
        self._steady("set_weights()", lambda: None)  # (between two documents: not inside)
        self._stream.set_weights(weights)

    @property
    def weights(self) -> dict[str, float]:
        """The weights in force, normalised."""
        return dict(zip(self.mixture.names, self._stream.interleave.weights, strict=True))

    @property
    def stats(self) -> MixtureStats:
        """Counts so far, summed and per part (``stats.parts[name]``)."""
        return self._steady("stats", lambda: self._stream.stats)

    def state_dict(self, mark: MixMark | None = None) -> dict[str, Any]:
        """The state after the last document handed out (or at ``mark``): resume with
        ``Loader.iter(state=…)``. A mark of an iterator of another run is a ``ValueError``."""
        return self.state(mark).to_json()

    def mark(self) -> MixMark:
        """Where the iterator is, cheaply (a mark per part); see ``state_dict``."""
        return self._steady("mark()", self._stream.mark)

    def next_run(self, in_order: bool = False) -> MixRun:
        """The next token documents, their ids end to end in the order they go out, each with
        its part (what the packers read: ``stream.DocumentSource``); once called, ``next()``
        is over (``in_order``: always, for a mixture).

        Raises:
            StopIteration: the mixture ended.
            ValueError: the iterator has no tokenizer.
        """
        if self.tokenizer is None:
            raise ValueError("runs of token documents need a tokenizer")
        return self._stream.next_run(self._gen)

    def windows_ahead(self) -> list[WindowAhead]:
        """After a reshard of best-fit batches: the windows old ranks had begun that this
        rank hands out first (``MixedStream.windows_ahead``)."""
        return self._stream.windows_ahead()

    def state(self, mark: MixMark | None = None) -> MixtureState:
        """``state_dict(mark)`` as its record (what a packer nests in its own state)."""
        if mark is None:
            mark = self._steady("state_dict()", self._stream.mark)
        _check_mark(mark, MixMark)
        return self._stream.state(mark)

    def close(self) -> None:
        """Stop the workers now. Safe to call twice; on the reading thread (``_end``)."""
        self._end()
        self._stream.close()


def _check_mark(mark: object, kind: type[Mark] | type[MixMark]) -> None:
    """Raise ``TypeError`` unless ``mark`` is a ``mark()`` of an iterator of this kind."""
    if not isinstance(mark, kind):
        raise TypeError(f"mark must be a mark() of this iterator (a {kind.__name__}), not "
                        f"{type(mark).__name__}")  # fmt: skip
