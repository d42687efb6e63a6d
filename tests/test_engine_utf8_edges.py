"""Invalid UTF-8 at the edges of a document (issue 14).

The workers check every document before the consumer decodes it, so that the
consumer's decode cannot fail. A check that is off by one at either end of a
document (its first byte, its last byte, a multi-byte sequence cut by its end)
lets a bad document through, and the consumer then dies with a raw
``UnicodeDecodeError`` instead of a ``CorruptDocument`` or a counted skip. Each
edge is tried under ``raise``, ``skip`` and ``decode_errors="replace"``, with text
and with a tokenizer (``bytes``), whose workers decode the text themselves.
"""

from __future__ import annotations

import lzma
from pathlib import Path
from typing import Any

import pytest

from openwebtext import CorruptDocument, Loader, OWTError, Stats
from support import inner_tar, outer_tar

#: The loader's hang timeout here: a worker hang becomes a WorkerError fast.
TIMEOUT = 5.0

#: A document whose only fault sits at one of its edges.
EDGES: dict[str, tuple[bytes, int, str]] = {
    # name: (bytes, where the check must say the error is, its reason)
    "last-byte": (b"valid text, then\xff", 16, "invalid start byte"),
    "first-byte": (b"\xffvalid text after", 0, "invalid start byte"),
    "first-byte-continuation": (b"\x80 a lone continuation byte", 0, "invalid start byte"),
    "only-byte": (b"\xfe", 0, "invalid start byte"),
    "cut-2-byte": ("café".encode()[:-1], 3, "unexpected end of data"),
    "cut-3-byte": ("price: 5 €".encode()[:-1], 9, "unexpected end of data"),
    "cut-3-byte-after-1": ("price: 5 €".encode()[:-2], 9, "unexpected end of data"),
    "cut-4-byte": ("smile 😀".encode()[:-1], 6, "unexpected end of data"),
}

#: Valid neighbours: multi-byte characters at both ends, so the member is not ASCII and
#: a check that reads a byte too many or too few at a boundary breaks them instead.
BEFORE = {"before.txt": "éa valid document ending in ü".encode()}
AFTER = {"after.txt": "😀 another valid one, ending in €".encode()}


def corpus(tmp_path: Path, bad: bytes) -> Path:
    docs = BEFORE | {"bad.txt": bad} | AFTER
    return outer_tar(tmp_path / "t.tar", [("m_data.xz", lzma.compress(inner_tar(docs)))])


def read_all(
    path: Path, **options: Any
) -> tuple[dict[str, Any], Stats | None, BaseException | None]:
    """Every document of ``path`` (corpus order), the stats, and any error at all: a raw
    ``UnicodeDecodeError`` is returned too, for the test to refuse by name."""
    docs: dict[str, Any] = {}
    it = Loader(str(path), workers=1, shuffle=False, timeout=TIMEOUT, **options).iter()
    try:
        for doc in it:
            docs[doc.name] = doc.text if options.get("tokenizer") is None else doc.tokens
    except (OWTError, UnicodeError) as exc:
        return docs, it.stats, exc
    finally:
        it.close()
    return docs, it.stats, None


def as_ids(data: bytes) -> list[int]:
    """What the ``bytes`` tokenizer makes of valid text: its bytes, then end-of-text."""
    return [*data, 256]


def expected(docs: dict[str, bytes], tokenizer: str | None) -> dict[str, Any]:
    if tokenizer is None:
        return {name: data.decode() for name, data in docs.items()}
    return {name: as_ids(data) for name, data in docs.items()}


def _listed(docs: dict[str, Any]) -> dict[str, Any]:
    return {name: (v if isinstance(v, str) else v.tolist()) for name, v in docs.items()}


pytestmark = [
    pytest.mark.waits_on_workers,
    pytest.mark.parametrize("tokenizer", [None, "bytes"], ids=["text", "tokens"]),
    pytest.mark.parametrize("edge", list(EDGES)),
]


def test_raise_names_file_member_and_document(
    tmp_path: Path, edge: str, tokenizer: str | None
) -> None:
    bad, at, reason = EDGES[edge]
    path = corpus(tmp_path, bad)
    docs, _, error = read_all(path, on_error="raise", tokenizer=tokenizer)
    assert isinstance(error, CorruptDocument), repr(error)  # never a raw UnicodeDecodeError
    assert (error.path, error.member, error.document) == (str(path), "m_data.xz", "bad.txt")
    assert f"invalid UTF-8 at byte {at}: {reason}" in str(error)
    assert "bad.txt" not in docs


def test_skip_counts_it_and_delivers_the_rest(
    tmp_path: Path, edge: str, tokenizer: str | None
) -> None:
    bad, at, _ = EDGES[edge]
    path = corpus(tmp_path, bad)
    docs, stats, error = read_all(path, on_error="skip", tokenizer=tokenizer)
    assert error is None, repr(error)
    assert _listed(docs) == expected(BEFORE | AFTER, tokenizer)
    assert stats is not None
    assert (stats.skipped_documents, stats.skipped_members, stats.replaced_documents) == (1, 0, 0)
    assert len(stats.skipped) == 1
    assert stats.skipped[0].startswith(f"{path}[m_data.xz]: invalid UTF-8 at byte {at}")
    assert stats.skipped[0].endswith("(document bad.txt)")


def test_replace_keeps_it_with_replacement_characters(
    tmp_path: Path, edge: str, tokenizer: str | None
) -> None:
    bad, _, _ = EDGES[edge]
    path = corpus(tmp_path, bad)
    docs, stats, error = read_all(
        path, on_error="raise", decode_errors="replace", tokenizer=tokenizer
    )
    assert error is None, repr(error)
    text = bad.decode("utf-8", "replace")
    assert "\ufffd" in text
    want = expected(BEFORE, tokenizer)
    want["bad.txt"] = text if tokenizer is None else as_ids(text.encode())
    want |= expected(AFTER, tokenizer)
    assert _listed(docs) == want
    assert stats is not None
    assert (stats.replaced_documents, stats.skipped_documents) == (1, 0)
