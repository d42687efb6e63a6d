"""Data faults x error policy (issue #5), one table: each damaged input raises an error naming
file, member and document, or under ``skip`` is counted and the rest delivered.
(Reliability, issue #5.)
"""

from __future__ import annotations

import lzma
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from openwebtext import (
    CorpusError,
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    OWTError,
    TruncatedMember,
    UnknownFormat,
)
from support import (
    LAST,
    MIDDLE,
    A,
    B,
    Docs,
    Members,
    MiB,
    U,
    all_but,
    copy_corpus,
    cut_member,
    decoded,
    docs_before_cut,
    flip_bit,
    member_offset,
    outer_tar,
    run,
    sample_docs,
    where,
    xz_member,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- data faults x policy ---------------------------------------------------------------


@dataclass
class Case:
    """A damaged corpus and what each policy must make of it.

    Attributes:
        paths: What to open.
        good: Every document that must still be delivered under ``skip``.
        errors: The exact error types acceptable under ``raise``.
        path: The error's ``.path``.
        member: The member at fault: the error's ``.member``, named in skips.
        document: The error's ``.document`` (None for member-level errors).
        message: A regex the error's message must match.
        skipped_members: Members ``skip`` must count as skipped whole.
        partial_members: Members cut short whose documents before the cut ``skip`` delivers.
        skipped_documents: Documents ``skip`` must count.
        options: Extra loader options (limits).
        raise_names_member: Whether the error under ``raise`` is checked for ``member``.
    """

    paths: list[Path]
    good: Docs
    errors: tuple[type[OWTError], ...]
    path: str
    member: str | None
    document: str | None
    message: str
    skipped_members: int = 0
    skipped_documents: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    raise_names_member: bool = True
    partial_members: int = 0


def _three(tmp_path: Path, name: str, middle: bytes) -> Path:
    """An outer tar: member ``a_data.xz`` (docs A), ``middle`` as ``name``, ``b_data.xz`` (B)."""
    return outer_tar(
        tmp_path / "t.tar",
        [("a_data.xz", xz_member(A)), (name, middle), ("b_data.xz", xz_member(B))],
    )


def case_truncated_outer(tmp_path: Path, small: Path, members: Members) -> Case:
    corpus = copy_corpus(small, tmp_path)
    tar = corpus / LAST[0]
    offset, size = member_offset(tar, LAST[1])
    os.truncate(tar, offset + size // 2)
    kept = docs_before_cut(tar.read_bytes()[offset:])  # an interrupted download keeps these
    assert kept
    return Case(
        [corpus], all_but(members, LAST) | kept, (TruncatedMember,), str(tar), LAST[1], None,
        r"file is truncated", partial_members=1,
    )  # fmt: skip


def case_truncated_member(tmp_path: Path, small: Path, members: Members) -> Case:
    cut = cut_member(sample_docs("c", 5))
    kept = docs_before_cut(cut)
    assert kept
    tar = _three(tmp_path, "c_data.xz", cut)
    return Case(
        [tar], decoded(A | B) | kept, (TruncatedMember,), str(tar), "c_data.xz", None,
        r"corrupt xz data: compressed data ends before", partial_members=1,
    )  # fmt: skip


def case_bit_flip(tmp_path: Path, small: Path, members: Members) -> Case:
    corpus = copy_corpus(small, tmp_path)
    tar = corpus / MIDDLE[0]
    offset, size = member_offset(tar, MIDDLE[1])
    flip_bit(tar, offset + size // 2)
    return Case(
        [corpus], all_but(members, MIDDLE), (CorruptMember,), str(tar), MIDDLE[1], None,
        r"corrupt xz data", skipped_members=1,
    )  # fmt: skip


def case_zero_length_member(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "z_data.xz", b"")
    return Case(
        [tar], decoded(A | B), (CorruptMember, UnknownFormat), str(tar), "z_data.xz", None,
        r".", skipped_members=1,
    )  # fmt: skip


def case_not_compressed(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "n_data.xz", b"plain words, not compressed data\n" * 40)
    return Case(
        [tar], decoded(A | B), (UnknownFormat,), str(tar), "n_data.xz", None,
        r"member is not a tar, or xz, gzip, bzip2 or zstd data", skipped_members=1,
    )  # fmt: skip


def case_invalid_utf8(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "u_data.xz", xz_member({**U, "u-bad.txt": b"caf\xe9 is latin-1"}))
    return Case(
        [tar], decoded(A | U | B), (CorruptDocument,), str(tar), "u_data.xz", "u-bad.txt",
        r"invalid UTF-8 at byte 3", skipped_documents=1,
    )  # fmt: skip


def case_oversized_document(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "o_data.xz", xz_member({**U, "u-big.txt": b"x" * 5000}))
    return Case(
        [tar], decoded(A | U | B), (CorruptDocument,), str(tar), "o_data.xz", "u-big.txt",
        r"document of 5000 bytes passes max_document_bytes=4096", skipped_documents=1,
        options={"max_document_bytes": 4096},
    )  # fmt: skip


def case_small_bomb(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "bomb_data.xz", lzma.compress(bytes(8 * MiB), preset=0))
    return Case(
        [tar], decoded(A | B), (MemberTooLarge,), str(tar), "bomb_data.xz", None,
        r"decompresses to more than max_member_bytes=1048576", skipped_members=1,
        options={"max_member_bytes": MiB},
    )  # fmt: skip


def case_trailing_garbage(tmp_path: Path, small: Path, members: Members) -> Case:
    tar = _three(tmp_path, "g_data.xz", xz_member(U) + b"not another stream" * 8)
    return Case(
        [tar], decoded(A | B), (CorruptMember,), str(tar), "g_data.xz", None,
        r"trailing garbage", skipped_members=1,
    )  # fmt: skip


def case_multi_stream_bomb(tmp_path: Path, small: Path, members: Members) -> Case:
    part = lzma.compress(bytes(600 << 10), preset=0)  # each stream alone is under the limit
    tar = _three(tmp_path, "ms_data.xz", part * 4)
    return Case(
        [tar], decoded(A | B), (MemberTooLarge,), str(tar), "ms_data.xz", None,
        r"decompresses to more than max_member_bytes=1048576", skipped_members=1,
        options={"max_member_bytes": MiB},
    )  # fmt: skip


CASES: dict[str, Callable[[Path, Path, Members], Case]] = {
    "truncated-outer-tar": case_truncated_outer,
    "truncated-member": case_truncated_member,
    "bit-flipped-member": case_bit_flip,
    "zero-length-member": case_zero_length_member,
    "member-not-compressed": case_not_compressed,
    "invalid-utf8": case_invalid_utf8,
    "document-over-limit": case_oversized_document,
    "small-bomb": case_small_bomb,
    "trailing-garbage": case_trailing_garbage,
    "multi-stream-bomb": case_multi_stream_bomb,
}

XFAIL: dict[tuple[str, str], str] = {}


def _params() -> list[Any]:
    """Every case under raise and skip, with the known gaps marked xfail."""
    params = []
    for name in CASES:
        for policy in ("raise", "skip"):
            reason = XFAIL.get((name, policy))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(name, policy, marks=marks, id=f"{name}-{policy}"))
    return params


@pytest.mark.parametrize(("name", "policy"), _params())
def test_data_fault(
    name: str, policy: str, tmp_path: Path, small_corpus: Path, pristine: Members
) -> None:
    """Each damaged input: raise names file, member, document; skip counts and delivers the rest."""
    case = CASES[name](tmp_path, small_corpus, pristine)
    results = [run(case.paths, workers=2, on_error=policy, **case.options) for _ in range(2)]
    first, second = results
    if policy == "raise":
        error = first.error
        assert error is not None, f"no error; delivered {len(first.docs)} documents"
        assert type(error) in case.errors, repr(error)
        assert isinstance(error, CorpusError)
        assert error.path == case.path
        assert re.search(case.message, error.message), error.message
        if case.raise_names_member:
            assert error.member == case.member
            assert where(case.path, case.member) in str(error)
        assert getattr(error, "document", None) == case.document
        if case.document is not None:
            assert f"(document {case.document})" in str(error)
        assert all(case.good.get(n) == text for n, text in first.docs.items())
    else:
        assert first.error is None, repr(first.error)
        assert first.docs == case.good  # every good document, byte-exact, once
        stats = first.stats
        assert stats is not None
        assert (stats.skipped_members, stats.skipped_documents, stats.partial_members) == (
            case.skipped_members,
            case.skipped_documents,
            case.partial_members,
        )
        assert stats.documents == len(case.good)
        assert stats.replaced_documents == 0
        assert len(stats.skipped) == (
            case.skipped_members + case.skipped_documents + case.partial_members
        )
        assert all(where(case.path, case.member) in s for s in stats.skipped), stats.skipped
        if case.document is not None:
            assert f"(document {case.document})" in stats.skipped[0]
    # An immediate second run over the same folders behaves the same.
    assert (type(second.error), second.docs, second.stats) == (
        type(first.error),
        first.docs,
        first.stats,
    )
