"""``owt tokenize`` applies the one skip policy (``policy``) as the stream does: a corpus's
files left out when it was opened (``Corpus.open(on_error="skip")``) count against
``max_errors`` and are recorded in ``meta.json``, once for a whole run however it was sliced."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import TooManyErrors
from openwebtext.prepare import PrepareOptions, merge, prepare


@pytest.fixture
def with_a_bad_file(small_corpus: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    shutil.copytree(small_corpus, folder)
    (folder / "urlsf_subset09.tar").write_bytes(b"garbage" * 100)
    return folder


def _opts(max_errors: int | None) -> PrepareOptions:
    return PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1, on_error="skip",
                          max_errors=max_errors)  # fmt: skip


def test_a_skipped_file_counts_against_max_errors_as_in_the_stream(
    with_a_bad_file: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open(with_a_bad_file, on_error="skip")
    assert len(corpus.skipped_files) == 1
    with pytest.raises(TooManyErrors, match="1 skipped, more than max_errors=0"):
        list(Loader(corpus, workers=0, on_error="skip", max_errors=0))
    with pytest.raises(TooManyErrors, match="1 skipped, more than max_errors=0"):
        prepare(corpus, tmp_path / "zero", _opts(0))
    report = prepare(corpus, tmp_path / "one", _opts(1))
    assert report.meta["counts"]["skipped_files"] == 1
    assert any("urlsf_subset09.tar" in message for message in report.skipped)
    slices = [tmp_path / f"s{i}" for i in range(3)]
    for i, folder in enumerate(slices):
        prepare(corpus, folder, _opts(1), shard=(i, 3))
    merged = merge(slices, tmp_path / "merged", max_errors=1)  # one file, not three
    assert merged.meta == report.meta
