"""A read member (``Member``: its bytes and where its documents lie) and what of its documents
is kept: the split's (``leave_out_split``), and the UTF-8 check (``check_utf8``, the one loop
that checks or decodes every kept document).

Both readers (``read``: tars and record files; ``tokens``: token files) return a ``Member``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from openwebtext.errors import CorruptDocument, CorruptMember
from openwebtext.plan import Split, in_validation
from openwebtext.records import Unit

__all__ = ["Member", "Split", "bad_utf8", "check_utf8", "leave_out_split"]


class Member(NamedTuple):
    """A decompressed member: its bytes and where its documents lie in them."""

    data: bytes
    names: Sequence[str]
    offsets: list[int]
    sizes: list[int]
    dropped: list[CorruptMember]
    """Documents left out: past ``max_document_bytes``, or invalid UTF-8 under ``strict``
    (``CorruptDocument``); and a ``TruncatedMember`` when the member was cut short and
    only the documents before the cut are listed.

    Their offset is -1, as is that of documents outside the requested split.
    """
    replace: int
    """How many documents are invalid UTF-8 and kept, to decode with ``errors="replace"``."""
    texts: list[str] | None = None
    """With ``Reader(..., texts=True)``: the text of every kept document (offset >= 0), in
    order, decoded by the UTF-8 check itself (what ``encode_member`` tokenizes)."""
    counts: list[int] | None = None
    """A token unit's: the ids of each document (0: left out), made with its offsets."""


def leave_out_split(
    split: Split | None, names: Sequence[str], offsets: list[int],
    dropped: list[CorruptMember] | None = None,
) -> None:  # fmt: skip
    """Set to -1 the offset of every document outside ``split`` (decided by its name), and
    take out of ``dropped`` those of them left out before (a line that is not JSON): another
    split's documents are not this stream's to count as skipped (nor to count as its split's
    against the counts file)."""
    if split is None:
        return
    which, fraction, seed = split
    held_out = which == "val"
    for k, name in enumerate(names):
        if in_validation(name, fraction, seed) is not held_out:
            offsets[k] = -1
    if dropped:
        dropped[:] = [d for d in dropped if not isinstance(d, CorruptDocument) or d.document is None
                      or in_validation(d.document, fraction, seed) is held_out]  # fmt: skip


def check_utf8(
    data: bytes,
    unit: Unit,
    names: Sequence[str],
    offsets: list[int],
    sizes: list[int],
    dropped: list[CorruptMember],
    errors: str | None,
    decode: bool = False,
) -> tuple[list[str] | None, int]:
    """Check that every kept document (offset >= 0) is UTF-8 and, with ``decode``, return
    the text of each; also return how many are invalid and kept, to decode with ``replace``.

    ``errors`` says what becomes of an invalid document: ``strict`` leaves it out (offset
    -1, a ``CorruptDocument`` in ``dropped``), ``replace`` keeps it (its text decoded with
    ``replace``), None does not check: without ``decode`` nothing is looked at; with it,
    invalid UTF-8 raises ``UnicodeDecodeError``, as decoding the documents afterwards would.

    Without ``decode``, ASCII is checked without decoding (one ``isascii()`` per member when
    it is all ASCII), so the consumer's decode at hand-out cannot fail. With it, each
    document is decoded once from a view of ``data`` (no copy of its bytes): the check is
    that decode.
    """
    texts: list[str] | None = [] if decode else None
    if texts is None and (errors is None or data.isascii()):
        return None, 0
    view = memoryview(data)
    replace = 0
    for k, offset in enumerate(offsets):
        if offset < 0:
            continue
        piece: bytes | memoryview
        if texts is None:  # a check: ASCII needs no decode
            piece = data[offset : offset + sizes[k]]
            if piece.isascii():
                continue
        else:
            piece = view[offset : offset + sizes[k]]
        try:
            text = str(piece, "utf-8")
        except UnicodeDecodeError as exc:
            if errors is None:
                raise
            if errors != "replace":
                dropped.append(bad_utf8(exc, unit, names[k]))
                offsets[k] = -1
                continue
            replace += 1
            if texts is None:
                continue
            text = str(piece, "utf-8", "replace")
        if texts is not None:
            texts.append(text)
    return texts, replace


def bad_utf8(error: UnicodeDecodeError, unit: Unit, name: str) -> CorruptDocument:
    """The error of a document that is not UTF-8, naming its file, member and name."""
    reason = f"invalid UTF-8 at byte {error.start}: {error.reason}"
    return CorruptDocument(reason, unit.path, unit.member, name)
