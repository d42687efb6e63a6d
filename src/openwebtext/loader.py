"""The loader: a corpus plus options (immutable), and the running iterator over documents.

``Loader`` is a description: picklable, comparable, safe to share. Iterating it
creates a ``DocumentIterator``, which owns the worker processes, decodes text,
shuffles within blocks, applies the error policy and keeps the counts. Close it
(or use it as a context manager) to stop the workers early; it also closes
itself when exhausted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from .errors import CorruptDocument, OWTError, TooManyErrors
from .index import Unit, index_paths
from .options import Options
from .plan import DOCUMENTS, permutation, plan
from .workers import Loaded, PoolOptions, WorkerPool

__all__ = ["Corpus", "Document", "DocumentIterator", "Loader", "Stats"]

log = logging.getLogger("openwebtext")

#: Largest decompressed member that travels through shared memory (larger: through the pipe).
SLOT_BYTES = 16 << 20


class Document(NamedTuple):
    """One document and where it came from."""

    text: str
    subset: str
    """The file it came from, without suffix (``urlsf_subset00``)."""
    member: str
    """The inner member's file name (``urlsf_subset00-1_data.xz``)."""
    name: str
    """The document's name inside the member (``0000000-….txt``)."""
    member_index: int
    """Index of the member in its file (``i`` of the reference API)."""
    document_index: int
    """Index of the document in its member (``j`` of the reference API)."""


@dataclass(frozen=True)
class Corpus:
    """An indexed corpus: its units, in corpus order."""

    units: tuple[Unit, ...]

    @classmethod
    def open(cls, paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Corpus:
        """Index paths, folders or glob patterns (see ``openwebtext.index``).

        Raises:
            CorpusError: a path holds no corpus, or a file is unreadable.
            UnknownFormat: a file or member is in no known format.
        """
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        return cls(tuple(index_paths(list(paths))))

    @property
    def compressed_bytes(self) -> int:
        return sum(u.size for u in self.units)

    def fingerprint(self) -> str:
        """A short hash of what the units are (names, sizes, formats), not where they lie."""
        h = hashlib.sha256()
        for u in self.units:
            h.update(f"{os.path.basename(u.path)}\0{u.member}\0{u.size}\0{u.kind}\n".encode())
        return h.hexdigest()[:16]


@dataclass(frozen=True)
class Stats:
    """What an iterator has delivered and left out so far."""

    documents: int
    text_bytes: int
    units: int
    skipped_members: int
    skipped_documents: int
    replaced_documents: int
    skipped: tuple[str, ...]
    """Names of what was skipped (``file[member]`` or ``file[member] (document …)``)."""


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
        corpus: Corpus | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
        base = options or Options()
        self.options = replace(base, **overrides) if overrides else base

    def replace(self, **overrides: Any) -> Loader:
        """A loader of the same corpus with some options changed."""
        return Loader(self.corpus, self.options, **overrides)

    def iter(self) -> DocumentIterator:
        """Start reading: a new iterator with its own workers."""
        return DocumentIterator(self.corpus, self.options)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.iter())

    def __repr__(self) -> str:
        return f"Loader({len(self.corpus.units)} units, {self.options})"


class DocumentIterator:
    """The running iterator of a ``Loader``: owns the workers until closed or exhausted."""

    def __init__(self, corpus: Corpus, options: Options, *, as_tuples: bool = False) -> None:
        self.corpus = corpus
        self.options = options
        self._as_tuples = as_tuples
        self._delivered = 0  # documents of finished blocks
        self._delivered_bytes = 0
        self._block_sizes: list[int] = []  # the current block's
        self._position = 0  # documents of the current block handed out
        self._units = 0
        self._skipped_members = 0
        self._skipped_documents = 0
        self._replaced = 0
        self._skipped: list[str] = []
        self._pool: WorkerPool | None = None
        self._gen = self._generate()

    # -- the iterator protocol ------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        # The generator itself: ``for`` then resumes it directly, with no
        # Python-level ``__next__`` call per document.
        return self._gen

    def __next__(self) -> Any:
        return next(self._gen)

    def close(self) -> None:
        """Stop the workers now. Safe to call twice."""
        self._gen.close()
        if self._pool is not None:
            self._pool.close()

    def __enter__(self) -> DocumentIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.close()

    @property
    def stats(self) -> Stats:
        return Stats(
            self._delivered + self._position,
            self._delivered_bytes + sum(self._block_sizes[: self._position]),
            self._units,
            self._skipped_members,
            self._skipped_documents,
            self._replaced,
            tuple(self._skipped),
        )

    # -- the pipeline -----------------------------------------------------------

    def _generate(self) -> Generator[Any, None, None]:
        opts = self.options
        order = plan(
            len(self.corpus.units),
            shuffle=opts.shuffle,
            seed=opts.seed,
            epoch=opts.epoch,
            rank=opts.rank,
            world_size=opts.world_size,
        )
        take = opts.take
        if take == 0 or not order:
            return
        pool = self._pool = WorkerPool(
            self.corpus.units,
            PoolOptions(
                workers=opts.workers,
                prefetch=opts.prefetch,
                slot_bytes=SLOT_BYTES,
                timeout=opts.timeout,
                retries=0 if opts.on_error == "raise" else 1,
                max_member_bytes=opts.max_member_bytes,
                max_document_bytes=opts.max_document_bytes,
            ),
        )
        blocks = self._blocks(pool.run(order))
        try:
            for block, sizes in blocks:
                if take is not None and self._delivered + len(block) >= take:
                    block = block[: take - self._delivered]
                self._block_sizes = sizes
                for k, doc in enumerate(block):
                    self._position = k + 1
                    yield doc
                self._delivered += len(block)
                self._delivered_bytes += sum(sizes[: len(block)])
                self._block_sizes = []
                self._position = 0
                if take is not None and self._delivered >= take:
                    return
        finally:
            blocks.close()
            pool.close()

    def _blocks(
        self, loaded: Generator[Loaded, None, None]
    ) -> Generator[tuple[list[Any], list[int]], None, None]:
        """Group decoded units into blocks of >= shuffle_buffer documents, each permuted.

        Yields each block with the UTF-8 size of each of its documents.
        """
        opts = self.options
        size = opts.shuffle_buffer if opts.shuffle else 0
        block: list[Any] = []
        sizes: list[int] = []
        first = -1
        try:
            for position, unit in enumerate(loaded):
                if first < 0:
                    first = position
                self._decode(unit, block, sizes)
                if len(block) >= size:
                    yield self._permuted(block, sizes, first)
                    block, sizes = [], []
                    first = -1
            if block:
                yield self._permuted(block, sizes, first)
        finally:
            loaded.close()

    def _permuted(
        self, block: list[Any], sizes: list[int], first: int
    ) -> tuple[list[Any], list[int]]:
        opts = self.options
        if not opts.shuffle or opts.shuffle_buffer == 0:
            return block, sizes
        order = permutation(len(block), opts.seed, DOCUMENTS, opts.epoch, opts.rank, first)
        return [block[k] for k in order], [sizes[k] for k in order]

    def _decode(self, loaded: Loaded, out: list[Any], out_sizes: list[int]) -> None:
        """Append the unit's documents to ``out`` and their UTF-8 sizes to ``out_sizes``."""
        unit = self.corpus.units[loaded.unit]
        self._units += 1
        for error in loaded.errors:
            self._error(error, member_level=not loaded.names)
        data, names, offsets, sizes = loaded.data, loaded.names, loaded.offsets, loaded.sizes
        member = os.path.basename(unit.member)
        subset, i = unit.subset, unit.member_index
        new = tuple.__new__
        append = out.append
        append_size = out_sizes.append
        for j, offset in enumerate(offsets):
            if offset < 0:
                continue  # left out by the worker (too large), already counted
            size = sizes[j]
            try:
                text = str(data[offset : offset + size], "utf-8")
            except UnicodeDecodeError as exc:
                replaced = self._bad_text(data[offset : offset + size], unit, names[j], exc)
                if replaced is None:
                    continue
                text = replaced
            append_size(size)
            if self._as_tuples:
                append(((i, j), (member, names[j]), text))
            else:
                append(new(Document, (text, subset, member, names[j], i, j)))

    def _bad_text(
        self, raw: memoryview | bytes, unit: Unit, name: str, exc: UnicodeDecodeError
    ) -> str | None:
        if self.options.decode_errors == "replace":
            self._replaced += 1
            return str(raw, "utf-8", "replace")
        error = CorruptDocument(
            f"invalid UTF-8 at byte {exc.start}: {exc.reason}", unit.path, unit.member, name
        )
        self._error(error, member_level=False, cause=exc)
        return None

    def _error(
        self, error: OWTError, *, member_level: bool, cause: BaseException | None = None
    ) -> None:
        opts = self.options
        if opts.on_error == "raise":
            raise error from cause
        if member_level:
            self._skipped_members += 1
        else:
            self._skipped_documents += 1
        if len(self._skipped) < 10_000:
            self._skipped.append(str(error))
        if opts.on_error == "warn":
            log.warning("skipped: %s", error)
        skips = self._skipped_members + self._skipped_documents
        if opts.max_errors is not None and skips > opts.max_errors:
            raise TooManyErrors(
                f"{skips} skipped, more than max_errors={opts.max_errors}; last: {error}"
            ) from error
