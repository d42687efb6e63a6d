"""Faults end in the library's errors or counted skips, never a hang or a lost document."""

from __future__ import annotations

import lzma
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from openwebtext import CorruptDocument, CorruptMember, Loader, TooManyErrors, WorkerError
from support import (
    child_pids,
    damage,
    inner_tar,
    interrupt_owt,
    member_offset,
    outer_tar,
    sample_docs,
)

MEMBER = "openwebtext/urlsf_subset00-2_data.xz"


@pytest.fixture
def corpus(tmp_path: Path, small_corpus: Path) -> Path:
    """A private copy of the small corpus, to damage."""
    return Path(shutil.copytree(small_corpus, tmp_path / "corpus"))


def member_docs(small_docs: dict[str, str], member_number: int) -> set[str]:
    """Names of the documents of member ``member_number`` (0-based over the corpus)."""
    names = list(small_docs)
    return set(names[member_number * 20 : (member_number + 1) * 20])


def test_corrupt_member_raises_naming_file_and_member(corpus: Path) -> None:
    tar = corpus / "urlsf_subset00.tar"
    offset, size = member_offset(tar, MEMBER)
    damage(tar, offset + size // 2, b"\x00\xff" * 8)
    with pytest.raises(CorruptMember) as info:
        list(Loader(corpus, workers=2))
    assert info.value.path == str(tar)
    assert info.value.member == MEMBER
    assert f"urlsf_subset00.tar[{MEMBER}]" in str(info.value)
    assert child_pids() == []


def test_corrupt_member_is_skipped_and_counted(corpus: Path, small_docs: dict[str, str]) -> None:
    tar = corpus / "urlsf_subset00.tar"
    offset, size = member_offset(tar, MEMBER)
    damage(tar, offset + size // 2, b"\x00\xff" * 8)
    with Loader(corpus, workers=2, on_error="skip").iter() as it:
        got = [d.name for d in it]
        stats = it.stats
    assert len(got) == len(set(got))
    assert set(got) == set(small_docs) - member_docs(small_docs, 1)
    assert stats.skipped_members == 1 and stats.skipped_documents == 0
    assert MEMBER in stats.skipped[0]
    with pytest.raises(TooManyErrors, match="max_errors=0"):
        list(Loader(corpus, workers=2, on_error="skip", max_errors=0))


def test_truncated_member(tmp_path: Path) -> None:
    good = lzma.compress(inner_tar(sample_docs("good", 5)))
    cut = lzma.compress(inner_tar(sample_docs("cut", 5)))
    outer = outer_tar(
        tmp_path / "t.tar", [("good_data.xz", good), ("cut_data.xz", cut[: len(cut) // 2])]
    )
    with pytest.raises(CorruptMember, match=r"t\.tar\[cut_data\.xz\]: corrupt xz data"):
        list(Loader(outer, shuffle=False))
    with Loader(outer, on_error="skip").iter() as it:
        assert sorted(d.name for d in it) == sorted(sample_docs("good", 5))
        assert it.stats.skipped_members == 1


def test_invalid_utf8_document(tmp_path: Path) -> None:
    docs = sample_docs("u", 4)
    docs["u-bad.txt"] = b"caf\xe9 latin-1, not UTF-8"
    outer = outer_tar(tmp_path / "u.tar", [("u_data.xz", lzma.compress(inner_tar(docs)))])
    with pytest.raises(
        CorruptDocument, match=r"u\.tar\[u_data\.xz\].*invalid UTF-8.*u-bad\.txt"
    ) as info:
        list(Loader(outer))
    assert info.value.document == "u-bad.txt"
    with Loader(outer, on_error="skip").iter() as it:
        assert sorted(d.name for d in it) == sorted(sample_docs("u", 4))
        assert it.stats.skipped_documents == 1
    with Loader(outer, decode_errors="replace").iter() as it:
        got = {d.name: d.text for d in it}
        assert got["u-bad.txt"] == "caf\ufffd latin-1, not UTF-8"
        assert it.stats.replaced_documents == 1


def test_killed_worker_is_an_error(small_corpus: Path, worker_fault: Callable[..., Path]) -> None:
    worker_fault(MEMBER, "kill")
    with pytest.raises(WorkerError, match=rf"exited with code -9 while reading .*{MEMBER}"):
        list(Loader(small_corpus, workers=2))
    assert child_pids() == []


def test_killed_worker_is_retried_under_skip(
    small_corpus: Path, small_docs: dict[str, str], worker_fault: Callable[..., Path]
) -> None:
    killed_once = worker_fault(MEMBER, "kill", times=1)
    with Loader(small_corpus, workers=2, on_error="skip").iter() as it:
        got = [d.name for d in it]
        assert it.stats.skipped_members == 0
    assert sorted(got) == sorted(small_docs)
    assert killed_once.exists()


def test_worker_killed_twice_is_skipped(
    small_corpus: Path, small_docs: dict[str, str], worker_fault: Callable[..., Path]
) -> None:
    worker_fault(MEMBER, "kill")
    with Loader(small_corpus, workers=2, on_error="skip").iter() as it:
        got = [d.name for d in it]
        assert it.stats.skipped_members == 1
    assert set(got) == set(small_docs) - member_docs(small_docs, 1)


def test_hung_worker_is_an_error(small_corpus: Path, worker_fault: Callable[..., Path]) -> None:
    worker_fault(MEMBER, "hang")
    start = time.monotonic()
    with pytest.raises(WorkerError, match=rf"sent nothing for 1 s while reading .*{MEMBER}"):
        list(Loader(small_corpus, workers=2, timeout=1.0))
    assert time.monotonic() - start < 30  # a bound against hanging, not a speed check
    assert child_pids() == []


def test_ctrl_c_stops_owt_stream(small_corpus: Path) -> None:
    code, err, left = interrupt_owt(
        ["stream", str(small_corpus), "-j", "2", "--jsonl", "--shuffle-buffer", "0"],
        processes=3,  # owt stream and its 2 workers
    )
    assert code == 130
    assert "interrupted" in err
    assert "Traceback" not in err
    assert left == []
