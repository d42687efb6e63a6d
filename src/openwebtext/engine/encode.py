"""A member's documents as token ids (``encode_member`` → ``Encoded``), in the worker that
read it, and nanoGPT's text rule (``nanogpt_text``) applied before, when asked."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import numpy as np

from openwebtext.engine.member import Member
from openwebtext.errors import WrongTokenizer
from openwebtext.records import Unit

if TYPE_CHECKING:
    from openwebtext.tokenizer import Tokenizer

__all__ = ["Encoded", "encode_member", "nanogpt_text"]


class Encoded(NamedTuple):
    """A member's documents as token ids (``tokenizer`` set): what crosses to the consumer."""

    data: bytes
    """The ids of the kept documents, each followed by the end-of-text id, as ``dtype``."""
    offsets: list[int]
    """Byte offset of each document's ids in ``data`` (-1: left out)."""
    counts: list[int]
    """Ids per document, end-of-text included (0: left out)."""


_BLANK_LINES = re.compile("\n\n\n+")


def nanogpt_text(text: str) -> str:
    """``text`` as the Hugging Face ``openwebtext`` loading script yields it to nanoGPT.

    Three or more newlines become two, then ``str.strip()`` (which strips Unicode
    whitespace, not only ASCII). An empty or all-whitespace document becomes ``""``.
    """
    return _BLANK_LINES.sub("\n\n", text).strip()


def _eot_inside(
    member: Member, unit: Unit, kept: list[int], ids: Any, counts: list[int], tokenizer: Tokenizer
) -> NoReturn:
    """Raise that the tokenizer wrote its end-of-text id inside a document of ``member`` (a
    stream would cut the document there, a token file count two)."""
    ends = np.cumsum(counts)
    last = set(ends.tolist())  # (just past each document's own end-of-text)
    first = next(int(at) for at in np.flatnonzero(ids == tokenizer.eot) if at + 1 not in last)
    k = kept[int(np.searchsorted(ends, first, "right"))]
    raise WrongTokenizer(
        f"the tokenizer {tokenizer.spec!r} wrote its end-of-text id {tokenizer.eot} inside "
        f"document {member.names[k]}: it would be cut there (the text of a token not marked "
        "special)", unit.path, unit.member,
    )  # fmt: skip


def encode_member(
    member: Member, tokenizer: Tokenizer, unit: Unit, *, normalise: bool = False
) -> Encoded:
    """Tokenize the kept documents of ``member``, read of ``unit`` (its text is checked).

    Each document's ids end with ``tokenizer.eot``, as nanoGPT's
    ``prepare.py`` writes them, so concatenating documents packs them.
    With ``normalise``, each text goes through ``nanogpt_text`` first.
    """
    kept = [k for k, offset in enumerate(member.offsets) if offset >= 0]
    texts = member.texts  # decoded by the reader's check (``Reader(..., texts=True)``)
    if texts is None:
        errors = "replace" if member.replace else "strict"
        data = member.data
        texts = [
            data[member.offsets[k] : member.offsets[k] + member.sizes[k]].decode("utf-8", errors)
            for k in kept
        ]
    if normalise:
        texts = [nanogpt_text(text) for text in texts]
    ids, kept_counts = tokenizer.encode_packed(texts)  # one array: no Python int per id
    if np.count_nonzero(ids == tokenizer.eot) != len(kept):  # (one pass: ~1% of encoding)
        _eot_inside(member, unit, kept, ids, kept_counts, tokenizer)
    offsets = [-1] * len(member.offsets)
    counts = [0] * len(member.offsets)
    itemsize = tokenizer.dtype.itemsize
    position = 0
    for k, count in zip(kept, kept_counts, strict=True):
        offsets[k] = position * itemsize
        counts[k] = count
        position += count
    return Encoded(ids.tobytes(), offsets, counts)
