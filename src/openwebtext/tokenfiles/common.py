"""What every token format shares: the error, an opened file, the end-of-text scan."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Literal, NamedTuple, overload

import numpy as np

from openwebtext.errors import CorpusError

__all__ = [
    "FORMATS",
    "TOKENS",
    "DocumentNames",
    "TokenFile",
    "TokenFileError",
    "TokenFormat",
    "damaged",
    "document_names",
    "document_range",
    "eot_ends",
    "recorded_tokenizer",
    "unit_member",
]

FORMATS = ("nanogpt", "megatron", "llmc", "datatrove")
TokenFormat = Literal["nanogpt", "megatron", "llmc", "datatrove"]
#: The ``Unit.kind`` of a run of documents of a token file (a token corpus's unit).
TOKENS = "tokens"

#: Ids scanned at a time for end-of-text (bounds the memory of a scan: 2 bytes each).
_SCAN = 1 << 26


class TokenFileError(CorpusError):
    """A token file whose header, index or size is not its format's (``path`` names it)."""


class TokenFile(NamedTuple):
    """One file of ids and its documents: document ``i`` is ``ids[ends[i-1]:ends[i]]``."""

    path: str
    ids: np.ndarray
    ends: np.ndarray
    tokenizer: tuple[str, str] | None = None
    """``(spec, fingerprint)`` of the tokenizer the ids were written with, as the run's
    ``meta.json`` beside the file records it (None: nothing recorded)."""


def recorded_tokenizer(meta: object) -> tuple[str, str] | None:
    """``(spec, fingerprint)`` a run's ``meta.json`` (parsed: its ``config``) records, or None."""
    config = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(config, dict):
        return None
    spec, fingerprint = config.get("tokenizer"), config.get("fingerprint")
    if isinstance(spec, str) and isinstance(fingerprint, str):
        return spec, fingerprint
    return None


def damaged(path: str | os.PathLike[str], why: str) -> TokenFileError:
    """The error for ``path``, damaged as ``why`` says."""
    return TokenFileError(why, os.fspath(path))


def eot_ends(ids: np.ndarray, eot: int, path: str | os.PathLike[str]) -> np.ndarray:
    """The document ends of ``ids`` laid out as ``doc, eot, doc, eot, …`` (scanned in chunks).

    Raises:
        TokenFileError: the ids do not end with ``eot`` (a cut file, or another layout).
    """
    found = [
        np.flatnonzero(ids[at : at + _SCAN] == eot) + (at + 1) for at in range(0, len(ids), _SCAN)
    ]
    ends = np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)
    if len(ids) and (not ends.size or ends[-1] != len(ids)):
        raise damaged(path, f"its {len(ids)} ids do not end with the end-of-text id {eot}")
    return ends


def unit_member(first: int, stop: int, file: str = "") -> str:
    """The member name of a token unit: documents ``[first, stop)`` of its file, after the
    file's name in a corpus of several files (``document_names``)."""
    return f"{file} docs {first}-{stop}" if file else f"docs {first}-{stop}"


def document_range(member: str) -> tuple[int, int]:
    """The documents ``[first, stop)`` a token unit's member name says."""
    first, stop = member.rsplit("docs ", 1)[1].split("-")
    return int(first), int(stop)


class DocumentNames(Sequence[str]):
    """The names of documents ``[first, stop)`` of a token unit, each made when asked: a
    unit's names cost nothing until a document is handed out by itself (a run of documents
    never asks), and travel from a worker as three values."""

    __slots__ = ("file", "first", "stop")

    def __init__(self, file: str, first: int, stop: int) -> None:
        self.file, self.first, self.stop = file, first, stop

    def __len__(self) -> int:
        return self.stop - self.first

    @overload
    def __getitem__(self, k: int) -> str: ...
    @overload
    def __getitem__(self, k: slice) -> list[str]: ...
    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return [self._name(j) for j in range(self.first, self.stop)[k]]
        return self._name(range(self.first, self.stop)[k])  # IndexError past the end

    def __iter__(self) -> Iterator[str]:
        return map(self._name, range(self.first, self.stop))

    def __eq__(self, other: object) -> bool:  # as the list of them would
        if isinstance(other, DocumentNames | list):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a list's

    def __repr__(self) -> str:
        return f"DocumentNames({self.file!r}, {self.first}, {self.stop})"

    def __reduce__(self) -> tuple[type[DocumentNames], tuple[str, int, int]]:
        return DocumentNames, (self.file, self.first, self.stop)

    def _name(self, k: int) -> str:
        return f"{self.file}#{k}" if self.file else str(k)


def document_names(member: str, first: int, stop: int) -> DocumentNames:
    """The names of documents ``[first, stop)`` of a token unit: their index in the file,
    after the file's name when the member carries it (a corpus of several files, whose
    names must differ: the held-out split hashes them). Made one by one when asked."""
    file = member.rsplit(" docs ", 1)[0] if " docs " in member else ""
    return DocumentNames(file, first, stop)
