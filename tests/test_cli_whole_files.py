"""Whole files that are not corpus data, through the commands (issue 19): under
``--on-error skip`` each is counted and named, and the good files are read; under the default
``raise`` the first one is one clear error line naming the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support import Owt, outer_tar, sample_docs, xz_member

BAD = {
    "urlsf_subset01.tar": os.urandom(20_000),  # random bytes
    "urlsf_subset02.tar": bytes(20_480),  # zeros: a tar's end, and nothing before it
    "urlsf_subset03.tar": b"",  # empty
}


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))  # the counts of owt index
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    outer_tar(corpus / "urlsf_subset00.tar", [("a_data.xz", xz_member(sample_docs("a", 3)))])
    for name, data in BAD.items():
        (corpus / name).write_bytes(data)
    return corpus


@pytest.mark.parametrize("command", ["stream", "index"])
def test_bad_whole_files_are_skipped_counted_and_named(
    owt: Owt, command: str, folder: Path
) -> None:
    result = owt(command, str(folder), "--on-error", "skip", "-j", "1", "-q")
    assert result.returncode == 0, result.stderr
    for name in BAD:
        assert str(folder / name) in result.stderr, (name, result.stderr)
    if command == "stream":
        assert "3 documents" in result.stderr


def test_a_bad_whole_file_is_one_error_line_by_default(owt: Owt, folder: Path) -> None:
    result = owt("stream", str(folder), "-j", "1", "-q")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "urlsf_subset01.tar" in result.stderr
