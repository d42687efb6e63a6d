"""What an audit of the docs' claims found (session 40), each now true.

- ``on_error="warn"`` logs "one WARNING line per skip" (reliability.md, ``Options``): a file
  left out when the corpus was opened counted as a skip but was never logged, in the loader
  or in ``prepare``.
- A sharded run under ``skip`` that counted the documents itself said nothing of a member it
  could not count: one at a share's edge is read by no rank, so its documents were in no
  share, with no word anywhere. Now every run of such counts says it, naming the member.
- ``reshard``, the door, documents its arguments (its docstring pointed at private code).
"""

from __future__ import annotations

import logging
import shutil
import tarfile
from pathlib import Path

import pytest

import openwebtext
from openwebtext import Corpus, Loader
from openwebtext.prepare import PrepareOptions, prepare


def _with_a_bad_file(small_corpus: Path, tmp_path: Path) -> Path:
    corpus = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    (corpus / "urlsf_subset09.tar").write_bytes(b"garbage" * 300)
    return corpus


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and text in r.getMessage()]  # fmt: skip


def test_warn_logs_a_file_left_out_at_the_open(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = _with_a_bad_file(small_corpus, tmp_path)
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        with Loader(str(corpus), on_error="warn", workers=0).iter() as documents:
            read = sum(1 for _ in documents)
        assert documents.stats.skipped_files == 1
    assert read > 0
    assert len(_warnings(caplog, "urlsf_subset09.tar")) == 1


def test_skip_does_not_log_it(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = _with_a_bad_file(small_corpus, tmp_path)
    loader = Loader(str(corpus), on_error="skip", workers=0)
    with caplog.at_level(logging.WARNING, logger="openwebtext"), loader.iter() as documents:
        sum(1 for _ in documents)
    assert _warnings(caplog, "urlsf_subset09.tar") == []


def test_prepare_under_warn_logs_a_file_left_out_at_the_open(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = _with_a_bad_file(small_corpus, tmp_path)
    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.2, on_error="warn")
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        prepare(Corpus.open(corpus, on_error="skip"), tmp_path / "out", options)
    assert len(_warnings(caplog, "urlsf_subset09.tar")) == 1


def _damaged_member(small_corpus: Path, tmp_path: Path) -> tuple[Path, str]:
    corpus = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    tar = sorted(corpus.glob("*.tar"))[0]
    with tarfile.open(tar) as t:
        member = t.getmembers()[0]
    with tar.open("r+b") as f:
        f.seek(member.offset_data + member.size // 2)
        f.write(b"\0" * 64)
    return corpus, member.name


@pytest.mark.parametrize("on_error", ["skip", "warn"])
def test_a_sharded_run_says_a_member_its_count_could_not_read(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, on_error: str
) -> None:
    corpus, member = _damaged_member(small_corpus, tmp_path)
    for rank in range(2):  # the first counts, the second reads the counts saved
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="openwebtext"):
            loader = Loader(str(corpus), shuffle=False, rank=rank, world_size=3,
                            on_error=on_error, workers=0)  # fmt: skip
            with loader.iter() as documents:
                sum(1 for _ in documents)
        said = _warnings(caplog, "could not be read when the documents were counted")
        assert len(said) == 1, caplog.text
        assert member in said[0] and "no rank reads it" in said[0]


def test_one_rank_reading_it_all_says_nothing_more(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One rank reads the member wherever it lies: a counted skip, as any damaged member."""
    corpus, _ = _damaged_member(small_corpus, tmp_path)
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        loader = Loader(str(corpus), shuffle=False, split="train", val_fraction=0.2,
                        on_error="skip", workers=0)  # fmt: skip
        with loader.iter() as documents:
            sum(1 for _ in documents)
        assert documents.stats.skipped_members + documents.stats.partial_members == 1
    assert _warnings(caplog, "could not be read when the documents were counted") == []


def test_reshard_documents_its_arguments() -> None:
    doc = openwebtext.reshard.__doc__ or ""
    for said in ("Args:", "states:", "world_size:", "even:", "rank:", "Raises:", "StateError",
                 "A mixture's states"):  # fmt: skip
        assert said in doc
    assert "_reshard" not in doc and "Stream." not in doc
