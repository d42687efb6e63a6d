"""The loader: a corpus plus options (immutable), the description the running iterators
(``iterators``) are made from.

``Loader`` is a description: picklable, comparable, safe to share. Iterating it
creates a ``DocumentIterator``, which owns the worker processes (through its
``Stream``) until it is closed, exhausted, or dropped; ``Loader.batches`` wraps
one in a ``Batches``. Use them as context managers, or call ``close()``, to stop
the workers early.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import DTypeLike

from openwebtext.errors import StateError, in_part
from openwebtext.index import Corpus
from openwebtext.iterators import DocumentIterator, MixtureIterator
from openwebtext.options import Options, as_int, options_with
from openwebtext.records import Document, TokenDocument
from openwebtext.stream import (
    Ahead,
    Batches,
    BatchesState,
    BatchIterator,
    BestFitBatches,
    DocumentState,
    Mixture,
    MixtureBatches,
    MixtureState,
    PackedBatch,
    Packing,
    Schedule,
    Stateful,
    Stats,
    ahead,
    batch_ids,
    batches_start,
    cu_seqlens,
    packing_window,
    schedule_of,
)
from openwebtext.tokenizer import load_tokenizer

__all__ = [
    "Ahead",
    "BatchIterator",
    "Batches",
    "BestFitBatches",
    "Document",
    "DocumentIterator",
    "Loader",
    "Mixture",
    "MixtureBatches",
    "MixtureIterator",
    "PackedBatch",
    "Schedule",
    "Stateful",
    "Stats",
    "TokenDocument",
    "ahead",
    "cu_seqlens",
]


class Loader:
    """A corpus and the options to read it with. Immutable; iterate it to read.

    Args:
        corpus: A ``Corpus``, or paths, folders or glob patterns to open.
        options: An ``Options``; keyword arguments override its fields.

    Example::

        loader = Loader("data/", workers=2, seed=0)
        with loader.iter() as docs:
            for doc in docs:
                print(doc.name, len(doc.text))
    """

    def __init__(
        self,
        corpus: Corpus | Mixture | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        self.options = options_with(options, overrides)
        on_error = self.options.on_error
        self.corpus: Corpus | Mixture
        if isinstance(corpus, Mixture):  # a part's bad files: raised here, or counted in it
            skipped = [in_part(copy.copy(c.skipped_files[0]), name)
                       for name, c in corpus.corpora.items() if c.skipped_files]  # fmt: skip
            if skipped and on_error == "raise":
                raise skipped[0]
            self.corpus = corpus
            return
        if not isinstance(corpus, Corpus):
            corpus = Corpus.open(corpus, on_error=on_error)
        elif corpus.skipped_files and on_error == "raise":
            raise corpus.skipped_files[0]
        self.corpus = corpus

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__ or name not in ("options", "corpus"):  # (set once, __init__)
            raise AttributeError(f"a Loader is immutable ({name}): loader.replace(seed=...) "
                                 "makes one of other options, Loader(corpus, loader.options) "
                                 "one of another corpus")  # fmt: skip
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Loader is immutable ({name})")

    def __eq__(self, other: object) -> bool:
        """The same corpus (a ``Corpus`` equal to it: its files and units; a ``Mixture``: the
        same object) and the same options."""
        if not isinstance(other, Loader):
            return NotImplemented
        return (self.corpus, self.options) == (other.corpus, other.options)

    def __hash__(self) -> int:
        return hash(self.options)

    def replace(self, **overrides: Any) -> Loader:
        """A loader of the same corpus with some options changed."""
        return Loader(self.corpus, self.options, **overrides)

    def iter(self, state: dict[str, Any] | None = None) -> DocumentIterator | MixtureIterator:
        """Start reading: a new iterator with its own workers (of a ``Mixture``: a
        ``MixtureIterator``).

        Args:
            state: A ``state_dict()`` of an iterator of this loader to continue from.

        Raises:
            StateError: ``state`` belongs to another corpus or other options.
        """
        if isinstance(self.corpus, Mixture):
            return MixtureIterator(self.corpus, self.options, state=state)
        return DocumentIterator(self.corpus, self.options, state=state)

    @overload
    def batches(
        self,
        seq_len: int | None = ...,
        batch_size: int | None = ...,
        *,
        schedule: Schedule | Sequence[tuple[int, int, int]] | None = ...,
        dtype: DTypeLike = ...,
        state: dict[str, Any] | None = ...,
        segments: Literal[False] = ...,
        packing: Packing = ...,
        window: int | None = ...,
        pad_id: int | None = ...,
    ) -> BatchIterator[np.ndarray[Any, Any]]: ...

    @overload
    def batches(
        self,
        seq_len: int | None = ...,
        batch_size: int | None = ...,
        *,
        schedule: Schedule | Sequence[tuple[int, int, int]] | None = ...,
        dtype: DTypeLike = ...,
        state: dict[str, Any] | None = ...,
        segments: Literal[True],
        packing: Packing = ...,
        window: int | None = ...,
        pad_id: int | None = ...,
    ) -> BatchIterator[PackedBatch]: ...

    @overload
    def batches(
        self,
        seq_len: int | None = ...,
        batch_size: int | None = ...,
        *,
        schedule: Schedule | Sequence[tuple[int, int, int]] | None = ...,
        dtype: DTypeLike = ...,
        state: dict[str, Any] | None = ...,
        segments: bool = ...,
        packing: Packing = ...,
        window: int | None = ...,
        pad_id: int | None = ...,
    ) -> BatchIterator[Any]: ...

    def batches(
        self,
        seq_len: int | None = None,
        batch_size: int | None = None,
        *,
        schedule: Schedule | Sequence[tuple[int, int, int]] | None = None,
        dtype: DTypeLike = np.int64,
        state: dict[str, Any] | None = None,
        segments: bool = False,
        packing: Packing = "concat",
        window: int | None = None,
        pad_id: int | None = None,
    ) -> BatchIterator[Any]:
        """Start reading packed batches: arrays of ``batch_size`` rows of ``seq_len + 1`` ids.

        Needs ``tokenizer``. ``concat`` (the default) puts documents end to end, rows
        overlapping by one id (``x, y = b[:, :-1], b[:, 1:]``); ``bestfit`` places whole
        documents into rows by best fit over ``window`` documents at a time (a document
        longer than a row is split into row-sized pieces, the rest of a row is ``pad_id``),
        rows not overlapping. Both resume exactly, and every batch has ``batch_size`` rows.
        ``ahead(batches)`` makes them on a thread ahead of the loop (``start()`` before the
        first), ``openwebtext.torch.to_device`` puts them on the accelerator ahead of it. A
        mixture's batches are a ``MixtureBatches``: ``set_weights`` between two batches.

        Args:
            seq_len: Ids each row predicts.
            batch_size: Rows per batch.
            schedule: Shapes that change during training, instead of ``seq_len`` and
                ``batch_size``: a ``Schedule`` or its table of ``(batch_index, seq_len,
                batch_size)`` steps (``Schedule.warmup`` makes the common ramps).
            dtype: dtype of the arrays.
            state: A ``state_dict()`` of batches of the same packing to continue from.
            segments: Yield ``PackedBatch`` records: ``tokens``, ``segment_ids`` (documents
                numbered from 1 within a row, 0 for padding) and ``positions`` (in the
                document); ``openwebtext.torch.document_mask`` and ``varlen`` turn
                segments into the attention layouts of SDPA and FlashAttention's varlen.
            packing: ``concat`` or ``bestfit``.
            window: Documents best fit packs at a time (a window is packed whole: under
                ``take`` it reads on to the end of the window the last document is in);
                None: 4096 (``WINDOW``). Best fit's only: concat refuses one.
            pad_id: The padding id of ``bestfit`` (None: the tokenizer's end-of-text id).

        Example::

            loader = Loader("data/", workers=2, seed=0, tokenizer="gpt2", epochs=None)
            with loader.batches(seq_len=1024, batch_size=8) as batches:
                for batch in batches:
                    x, y = batch[:, :-1], batch[:, 1:]
        """
        if self.options.tokenizer is None:
            raise ValueError("batches need token ids: make the loader with tokenizer='gpt2' (or …)")
        pad_id = as_int(pad_id)  # (numpy's integers too)
        window = packing_window(packing, as_int(window))
        shapes = schedule_of(seq_len, batch_size, schedule)
        start = batches_start(state, shapes, packing, window)
        kind = batch_ids(dtype, load_tokenizer(self.options.tokenizer), segments, pad_id, packing)
        corpus, saved = self.corpus, None if start is None else start.documents
        if isinstance(corpus, Mixture) and isinstance(saved, DocumentState):
            raise StateError("a state of batches of a corpus, not of this mixture's", "documents")
        if isinstance(corpus, Corpus) and isinstance(saved, MixtureState):
            raise StateError("a state of batches of a mixture, not of this corpus's", "documents")

        def packer(start: BatchesState | None, take: int | None) -> BatchIterator[Any]:
            """The packer going on from ``start``, that reads ``take`` documents."""
            # Best fit counts ``take`` itself: it reads the window the last document is in whole.
            # A resumed run's ``take`` does not count the document its first batch is inside
            # (concat: ids of it in batches) nor that window (best fit): their run counted them.
            bestfit = packing == "bestfit"
            begun = int(start is not None and start.offset > 0)  # (take=0: the rest of it)
            options = options_with(self.options, {"take": None if bestfit or take is None
                                                  else take + begun})  # fmt: skip
            saved = None if start is None else start.documents
            documents: DocumentIterator | MixtureIterator
            try:  # (the documents' state is the batches state's ``documents``)
                if isinstance(corpus, Mixture):
                    assert not isinstance(saved, DocumentState)  # (refused above)
                    documents = MixtureIterator(corpus, options, state=saved)
                else:
                    assert not isinstance(saved, MixtureState)
                    # (a next document in batches out: within the run, never past it)
                    documents = DocumentIterator(corpus, options, state=saved, _begun=begun > 0)
            except StateError as exc:
                raise exc.within("documents") from None
            assert documents.tokenizer is not None
            if bestfit:
                pad = documents.tokenizer.eot if pad_id is None else pad_id
                assert window is not None  # (``packing_window``: best fit's)
                return BestFitBatches(documents, schedule=shapes, seed=self.options.seed,
                                      pad_id=pad, dtype=kind, segments=segments, window=window,
                                      start=start, take=take)  # fmt: skip
            return Batches(documents, documents.tokenizer, schedule=shapes, dtype=kind,
                           segments=segments, start=start)  # fmt: skip

        if isinstance(corpus, Mixture):
            checked = functools.partial(batches_start, schedule=shapes, packing=packing,
                                        window=window)  # fmt: skip
            return MixtureBatches(corpus, packer, start, self.options.take, parse=checked)
        return packer(start, self.options.take)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.iter())

    def __repr__(self) -> str:
        if isinstance(self.corpus, Mixture):
            return f"Loader({self.corpus!r}, {self.options})"
        return f"Loader({len(self.corpus.units)} units, {self.options})"
