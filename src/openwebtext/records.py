"""The records that cross layers: a unit of work, and the documents a stream hands out.

``Unit`` is what the index finds and every layer below the stream reads; ``Document`` and
``TokenDocument`` are what a stream yields. They are NamedTuples: as cheap as bare tuples,
read by name, pickled as tuples. ``Names`` are a unit's documents' names, made when asked.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np

__all__ = ["Document", "Names", "TokenDocument", "Unit"]


class Unit(NamedTuple):
    """One unit of work: an inner member, located by byte offset in its file."""

    path: str
    """The file that holds the member."""
    member: str
    """The member's name inside ``path`` (the file's own name for a bare member)."""
    offset: int
    size: int
    kind: str
    """The member's format: ``xz``, ``gzip``, ``bzip2``, ``zstd`` or ``tar``."""
    subset: str
    """The file's name without its suffix, e.g. ``urlsf_subset00``."""
    member_index: int
    """Index of the member within its file (``i`` of the reference API)."""


class Names(Sequence[str]):
    """The names of a unit's documents, each made when asked: ``{file}{sep}{number}`` (the
    number alone when there is no file). A token unit's and a parquet row group's number
    each document by its index in the file (``numbers`` a ``range``: nothing stored), a JSON
    lines chunk's by the byte its line begins at (an ``array`` of int64: 8 bytes a document).
    A unit of millions of short documents would hold a string for each (~100 bytes) in its
    worker, in the pipe and in the consumer; these are made only for a document handed out by
    itself, or counted in a split. Read as the list of them would be: by index, slice,
    iteration, equality and through a pickle."""

    __slots__ = ("file", "numbers", "sep")

    def __init__(self, file: str, numbers: range | array[int], sep: str = "#") -> None:
        self.file, self.numbers, self.sep = file, numbers, sep

    def __len__(self) -> int:
        return len(self.numbers)

    @overload
    def __getitem__(self, k: int) -> str: ...
    @overload
    def __getitem__(self, k: slice) -> list[str]: ...
    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return list(map(self._name, self.numbers[k]))
        return self._name(self.numbers[k])  # IndexError past the end

    def __iter__(self) -> Iterator[str]:
        return map(self._name, self.numbers)

    def __eq__(self, other: object) -> bool:  # as the list of them would
        if isinstance(other, Names | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a list's

    def __repr__(self) -> str:
        return f"Names({self.file!r}, {self.numbers!r}, {self.sep!r})"

    def __reduce__(self) -> tuple[type[Names], tuple[str, range | array[int], str]]:
        return Names, (self.file, self.numbers, self.sep)

    def _name(self, number: int) -> str:
        return f"{self.file}{self.sep}{number}" if self.file else str(number)


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
    source: str | None = None
    """The name of the mixture's part it came from (``Mixture``); None: a single corpus."""


class TokenDocument(NamedTuple):
    """One document as token ids (a loader with ``tokenizer``), and where it came from."""

    tokens: np.ndarray[Any, np.dtype[np.unsignedinteger[Any]]]
    """Its ids, ending with the tokenizer's end-of-text id, as the tokenizer's dtype."""
    subset: str
    member: str
    name: str
    member_index: int
    document_index: int
    source: str | None = None
    """The name of the mixture's part it came from (``Mixture``); None: a single corpus."""
