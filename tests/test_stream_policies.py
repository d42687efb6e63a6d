"""Policies: ``warn``, ``max_errors``, ``decode_errors``, the ``owt stream`` summary, and the
documented defaults. (Reliability, issue #5.)
"""

from __future__ import annotations

import itertools
import logging
import pickle
import re
from pathlib import Path

import pytest

from openwebtext import (
    Corpus,
    CorpusError,
    CorruptMember,
    Loader,
    Options,
    StateError,
    TooManyErrors,
)
from openwebtext import cli as owt_cli
from openwebtext.stream import ensure_counts
from support import (
    ROOT,
    A,
    B,
    Docs,
    corrupt_member,
    decoded,
    docs_before_cut,
    outer_tar,
    run,
    sample_docs,
    where,
    xz_member,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- policies: warn, max_errors, decode_errors, the owt stream summary -----------------


@pytest.fixture
def three_faults(tmp_path: Path) -> tuple[Path, Docs]:
    """An outer tar with a corrupt member, a truncated member and one invalid-UTF-8 document.

    The truncated member lacks only its xz index: its documents are all before the cut.
    """
    cut = xz_member(sample_docs("d", 3))
    tar = outer_tar(
        tmp_path / "three.tar",
        [
            ("a_data.xz", xz_member({**A, "a-bad.txt": b"\xff\xfe not UTF-8"})),
            ("c_data.xz", corrupt_member(sample_docs("c", 3))),
            ("b_data.xz", xz_member(B)),
            ("d_data.xz", cut[: len(cut) - 20]),
        ],
    )
    return tar, decoded(A | B) | docs_before_cut(cut[: len(cut) - 20])


def test_warn_logs_one_line_per_skip(
    three_faults: tuple[Path, Docs], caplog: pytest.LogCaptureFixture
) -> None:
    """warn: skip, plus one WARNING line on the "openwebtext" logger per skip."""
    tar, good = three_faults
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        outcome = run(tar, workers=2, on_error="warn", shuffle=False)
    assert outcome.error is None and outcome.docs == good
    assert outcome.stats is not None
    records = [r for r in caplog.records if r.name == "openwebtext"]
    assert [r.levelno for r in records] == [logging.WARNING] * 3
    assert [r.getMessage() for r in records] == [f"skipped: {s}" for s in outcome.stats.skipped]
    named = " ".join(outcome.stats.skipped)
    for part in ("[a_data.xz]", "(document a-bad.txt)", "[c_data.xz]", "[d_data.xz]"):
        assert part in named


def test_counting_for_even_sharding_leaves_the_warnings_to_the_stream(
    three_faults: tuple[Path, Docs], caplog: pytest.LogCaptureFixture, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """warn: the count made on first use warns nothing; the stream warns as it reads."""
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    tar, _ = three_faults
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        counted = ensure_counts(Corpus.open(tar), Options(on_error="warn"), always=True)
    assert counted.counts is not None and counted.counts.documents == (len(A) + 1, 0, len(B), 3)
    said = [r.getMessage() for r in caplog.records if r.name == "openwebtext"]
    assert [m for m in said if not m.startswith("counting the documents of")] == []


def test_max_errors_turns_too_many_skips_into_an_error(three_faults: tuple[Path, Docs]) -> None:
    """max_errors=3 allows three skips; max_errors=2 ends the run at the third."""
    tar, good = three_faults
    enough = run(tar, workers=2, on_error="skip", max_errors=3)
    assert enough.error is None and enough.docs == good
    assert enough.stats is not None
    assert (enough.stats.skipped_members, enough.stats.skipped_documents) == (1, 1)
    assert enough.stats.partial_members == 1
    too_many = run(tar, workers=2, on_error="skip", max_errors=2, shuffle=False)
    assert isinstance(too_many.error, TooManyErrors)
    assert str(too_many.error).startswith("3 skipped, more than max_errors=2; last: ")
    assert isinstance(too_many.error.__cause__, CorpusError)
    assert str(too_many.error.__cause__) in str(too_many.error)


@pytest.mark.parametrize("decode_errors", ["strict", "replace"])
def test_a_state_taken_after_a_skip_resumes_without_counting_it_again(
    three_faults: tuple[Path, Docs], decode_errors: str
) -> None:
    """A state taken inside the block a skip was met in: its counts hold the skip. The resumed
    run reads that block again, and counted it again (3 skips where one run has 2; under
    ``max_errors=2`` the resumed run failed where the run did not; U+FFFD documents counted
    again too). Now the resumed run's counts are the uninterrupted run's, at every stop, the
    run stopped by its consumer or by its ``take`` (whose end inside a block said its skips)."""
    tar, _ = three_faults
    options = {"workers": 0, "on_error": "skip", "decode_errors": decode_errors, "epochs": 2}
    with Loader(tar, **options).iter() as it:
        whole = [d.name for d in it]
        counted = it.stats
    stops = (1, 3, len(whole) // 2 + 1)  # (inside the first block of each epoch, or not)
    for stop, by_take in itertools.product(stops, (False, True)):
        with Loader(tar, **options, take=stop if by_take else None).iter() as it:
            first = [next(it).name for _ in range(stop)]
            if by_take:
                assert next(it, None) is None
            state = it.state_dict()
        with Loader(tar, **options, max_errors=counted.skips).iter(state=state) as it:
            assert first + [d.name for d in it] == whole, (stop, by_take)
            for name in ("skipped_members", "skipped_documents", "partial_members",
                         "replaced_documents"):  # fmt: skip
                assert getattr(it.stats, name) == getattr(counted, name), (stop, by_take, name)


def test_a_member_damaged_since_the_state_was_taken_is_said_on_resume(tmp_path: Path) -> None:
    """The block a state is inside is read again on resume: a member of it damaged since (in
    place, its size kept) is the error under ``raise``; under ``skip`` the block holds other
    documents than when the state was taken, and the state's position in it would hand some
    out twice and lose others (session 35's red team: this test had pinned 9 documents out,
    not which), so the resume is refused, naming the counts then and now."""
    members = [(f"{c}_data.xz", xz_member(sample_docs(c, 5))) for c in "abc"]
    tar = outer_tar(tmp_path / "t.tar", members)
    with Loader(tar, workers=0).iter() as it:
        next(it)
        state = it.state_dict()
    raw = bytearray(tar.read_bytes())
    raw[raw.find(members[1][1]) + len(members[1][1]) // 2] ^= 0xFF
    tar.write_bytes(bytes(raw))
    with pytest.raises(CorruptMember, match=re.escape(where(str(tar), "b_data.xz"))):
        list(Loader(tar, workers=0).iter(state=state))
    with pytest.raises(StateError, match=r"reads otherwise now .*skipped_members 0 then, 1 now"):
        list(Loader(tar, workers=0, on_error="skip").iter(state=state))


def test_the_summary_of_a_resumed_run_says_its_own_skips(
    three_faults: tuple[Path, Docs], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary counts the documents a run read, and so its skips: a run resumed past the
    blocks its state skipped in said the state's skips as its own (with no name), and the
    summaries of a run stopped and resumed added up to more skips than the run had."""
    tar, good = three_faults
    state, flags = tmp_path / "state.json", ("-q", "--no-shuffle", "--on-error", "skip")
    take = str(len(A) + len(B))  # member a (its bad document skipped), c (corrupt), b
    assert owt_cli.main(["stream", str(tar), *flags, "--take", take, f"--state-out={state}"]) == 0
    assert "skipped 1 member, 1 document;" in capsys.readouterr().err
    assert owt_cli.main(["stream", str(tar), *flags, "--resume", str(state)]) == 0
    said = capsys.readouterr().err.splitlines()[0]  # member d: read up to its cut (partial)
    assert said.startswith(f"{len(good) - len(A) - len(B)} documents, ") and "skipped" not in said


def test_an_error_quoting_another_library_s_message_is_one_printable_line() -> None:
    """pyarrow's message of a damaged page (a control byte, newlines) went as it was into a
    CorruptMember: one skip was three WARNING lines, a raw byte on the terminal, a name of
    ``stats.skipped`` over three lines."""
    error = CorruptMember("corrupt parquet row group 1: don't know what type: \x0f\n"
                          "Deserializing page header failed.\n", "a.parquet", "rg1")  # fmt: skip
    assert str(error) == ("a.parquet[rg1]: corrupt parquet row group 1: don't know what type: "
                          "\\x0f Deserializing page header failed.")  # fmt: skip
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_invalid_utf8_under_replace_is_counted(three_faults: tuple[Path, Docs]) -> None:
    """decode_errors=replace: U+FFFD and a count, not a skip; corrupt members still count."""
    tar, good = three_faults
    outcome = run(tar, workers=2, on_error="skip", decode_errors="replace")
    assert outcome.stats is not None
    assert outcome.stats.replaced_documents == 1
    assert (outcome.stats.skipped_members, outcome.stats.skipped_documents) == (1, 0)
    assert outcome.docs == good | {"a-bad.txt": "\ufffd\ufffd not UTF-8"}
    assert isinstance(run(tar, workers=2, decode_errors="replace").error, CorruptMember)


@pytest.mark.parametrize("policy", ["raise", "skip", "warn"])
def test_owt_stream_reports_errors_and_skips(
    policy: str, three_faults: tuple[Path, Docs], capsys: pytest.CaptureFixture[str]
) -> None:
    """owt stream: raise exits 1 naming file, member, document; skip/warn print counts."""
    tar, good = three_faults
    code = owt_cli.main(["stream", str(tar), "-j", "2", "-q", "--no-shuffle", "--on-error", policy])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if policy == "raise":
        assert code == 1
        assert f"owt: error: {where(str(tar), 'a_data.xz')}: invalid UTF-8" in err
        return
    assert code == 0
    assert f"{len(good)} documents, " in err
    assert "skipped 1 member, 1 document" in err
    skipped = [line for line in err.splitlines() if line.startswith("  skipped: ")]
    assert len(skipped) == 3
    assert all(f"{tar}[" in line for line in skipped)
    code = owt_cli.main(
        ["stream", str(tar), "-j", "1", "-q", "--on-error", policy, "--max-errors", "1"]
    )
    err = capsys.readouterr().err
    assert code == 1 and "more than --max-errors 1" in err  # (owt says its flags)


# -- the documentation -------------------------------------------------------------------


def test_documented_defaults_are_the_real_ones() -> None:
    """docs/reliability.md's table of limits and policies matches ``Options()``."""
    text = (ROOT / "docs" / "reliability.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| `([^`]*)`", text, re.M))
    defaults = Options()
    names = {
        "on_error", "max_errors", "decode_errors", "max_document_bytes",
        "max_member_bytes", "timeout", "prefetch",
    }  # fmt: skip
    assert names <= set(rows), sorted(names - set(rows))
    for name, shown in rows.items():
        assert shown == repr(getattr(defaults, name)), name
