"""Damage that is easy to miss in the outer tar: a damaged header, a truncated outer tar.
(Reliability, issue #5.)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openwebtext import (
    CorpusError,
    Loader,
)
from support import (
    LAST,
    MIDDLE,
    Members,
    all_but,
    copy_corpus,
    flip_bit,
    member_offset,
    run,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- damage that is easy to miss: outer headers, concatenated streams ----------------------


@pytest.mark.parametrize("how", ["bit-flip-in-header", "cut-inside-header", "cut-at-header"])
def test_damaged_outer_header_is_not_a_silent_loss(
    how: str, tmp_path: Path, small_corpus: Path, pristine: Members
) -> None:
    """A damaged outer header is an error naming the file under raise; under skip the file
    is skipped, counted and named."""
    corpus = copy_corpus(small_corpus, tmp_path)
    tar = corpus / MIDDLE[0]
    header = member_offset(tar, MIDDLE[1])[0] - 512
    if how == "bit-flip-in-header":
        flip_bit(tar, header + 10)  # inside the member's name: the checksum no longer matches
    else:
        os.truncate(tar, header + (100 if how == "cut-inside-header" else 0))
    outcome = run(corpus, workers=2, on_error="raise")
    assert isinstance(outcome.error, CorpusError)
    assert outcome.error.path == str(tar)
    outcome = run(corpus, workers=2, on_error="skip")
    assert outcome.error is None and outcome.stats is not None
    assert outcome.stats.skipped_files == 1
    assert [s for s in outcome.stats.skipped if s.startswith(str(tar)) and "kept the 1 " in s]
    # The members before the damaged header are intact: skip keeps them.
    lost = [key for key in pristine if key[0] == MIDDLE[0] and key[1] >= MIDDLE[1]]
    assert outcome.docs == all_but(pristine, *lost)


def test_truncated_outer_tar_names_the_cut_member(tmp_path: Path, small_corpus: Path) -> None:
    """The error for an outer tar cut inside a member's data names that member (when read)."""
    corpus = copy_corpus(small_corpus, tmp_path)
    tar = corpus / LAST[0]
    offset, size = member_offset(tar, LAST[1])
    os.truncate(tar, offset + size // 2)
    with pytest.raises(CorpusError) as info:
        list(Loader(corpus))
    assert (info.value.path, info.value.member) == (str(tar), LAST[1])
