"""The records that cross layers: a unit of work, and the documents a stream hands out.

``Unit`` is what the index finds and every layer below the stream reads; ``Document`` and
``TokenDocument`` are what a stream yields. They are NamedTuples: as cheap as bare tuples,
read by name, pickled as tuples.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Document", "TokenDocument", "Unit"]


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
