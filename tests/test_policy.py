"""The one skip policy (openwebtext.policy): which counter an error goes under, and the bound."""

from __future__ import annotations

import logging

import pytest

from openwebtext.errors import (
    CorruptDocument,
    CorruptMember,
    MemberTooLarge,
    TooManyErrors,
    TruncatedMember,
    WorkerError,
)
from openwebtext.policy import SkipPolicy, counter_of, skips_in


@pytest.mark.parametrize(
    ("error", "counter"),
    [
        (TruncatedMember("cut", "f.tar", "m"), "partial_members"),
        (CorruptDocument("bad", "f.tar", "m", "d"), "skipped_documents"),
        (CorruptMember("bad", "f.tar", "m"), "skipped_members"),
        (MemberTooLarge("big", "f.tar", "m"), "skipped_members"),
        (WorkerError("died", "f.tar", "m"), "skipped_members"),
    ],
)
def test_each_error_has_one_counter(error: CorruptMember, counter: str) -> None:
    assert counter_of(error) == counter


def test_every_kind_of_skip_counts_against_max_errors() -> None:
    policy = SkipPolicy("skip", max_errors=3)
    counts: dict[str, int] = {"skipped_files": 1}
    policy.count(TruncatedMember("cut", "f", "a"), counts)
    policy.count(CorruptDocument("bad", "f", "b", "d"), counts)  # 3 skips: at the bound
    with pytest.raises(TooManyErrors, match=r"^4 skipped, more than max_errors=3; last: ") as e:
        policy.count(CorruptMember("bad", "f", "c"), counts)
    assert isinstance(e.value.__cause__, CorruptMember)
    assert counts == {"skipped_files": 1, "partial_members": 1, "skipped_documents": 1,
                      "skipped_members": 1}  # fmt: skip


def test_raise_raises_the_error_itself_and_warn_logs_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = CorruptMember("bad", "f.tar", "m")
    with pytest.raises(CorruptMember):
        SkipPolicy("raise").take(error)
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        assert SkipPolicy("warn").take(error) == "skipped_members"
    assert [r.getMessage() for r in caplog.records] == [f"skipped: {error}"]
    with pytest.raises(ValueError, match="on_error"):
        SkipPolicy("ignore")


def test_damaged_counts_are_refused() -> None:
    assert skips_in({"skipped_members": 2, "documents": {"train": 5}}) == 2
    for bad in ("1", -1, True, None):
        with pytest.raises(ValueError, match="skipped_documents"):
            skips_in({"skipped_documents": bad})
