"""``owt tokenize``'s progress and summary: rates count this run's work only, also in a run
resumed from another's progress; warnings for a split too small to train on."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.cli import main
from openwebtext.cli.prepared import with_progress
from openwebtext.prepare import PrepareOptions, Progress, Report, prepare

SUMMARY = re.compile(
    r"^(?P<docs>\d+) documents, (?P<total>[\d,]+) tokens in (?P<seconds>[\d.]+) s "
    r"\((?P<this>[\d,]+) tokens in this run, (?P<rate>[\d,]+) tokens/s, resumed\)",
    re.MULTILINE,
)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_a_resumed_run_s_summary_rates_this_run_s_tokens(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    corpus = Corpus.open([str(small_corpus)])
    seen: list[Progress] = []

    def interrupted_after_four_members(event: Progress) -> None:
        seen.append(event)
        if len(seen) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare(corpus, out, PrepareOptions(workers=1), progress=interrupted_after_four_members)
    earlier = seen[-1].tokens  # the four members' tokens, kept in OUT's progress
    assert main(["tokenize", str(small_corpus), "--out", str(out), "-j", "1", "-q"]) == 0
    err = capsys.readouterr().err
    found = SUMMARY.search(err)
    assert found, err
    total, this = _number(found["total"]), _number(found["this"])
    assert this == total - earlier and 0 < this < total
    seconds, rate = float(found["seconds"]), _number(found["rate"])
    assert abs(rate * seconds - this) <= 0.05 * rate + 1  # this run's tokens, not the total


def _fake_run(events: list[Progress], meta: dict[str, object]) -> Callable[..., Report]:
    def run(update: Callable[[Progress], None]) -> Report:
        for event in events:
            update(event)
            time.sleep(0.3)
        return Report(Path("OUT"), meta, resumed=True)

    return run


def test_the_bar_s_rate_leaves_out_earlier_runs_tokens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A permuted copy resumed at 9 M tokens, going on by 1,000 tokens: the bar shows the
    pace of those 1,000, not 9 M over this run's second."""
    done = 9_000_000
    events = [Progress("permute", 2 * (done + k * 250), 2 * 10_000_000, done + k * 250)
              for k in range(5)]  # fmt: skip
    meta = {"config": {"dtype": "uint16", "split_rule": "hash", "val_fraction": 0.0005},
            "counts": {"documents": {"train": 1, "val": 1}, "tokens": {"train": 5, "val": 5},
                       "skipped_members": 0, "skipped_documents": 0, "partial_members": 0},
            "files": ["train.bin", "val.bin"]}  # fmt: skip
    assert with_progress(_fake_run(events, meta), quiet=False) == 0
    err = capsys.readouterr().err
    rates = [float(r) for r in re.findall(r"([\d.]+) M tokens/s", err)]
    assert rates, err
    assert max(rates) < 0.01, err  # ~1,000 tokens in ~1.2 s
    assert "(resumed)" in err  # no tokenizing in this run: no rate of it


VAL_FRACTION = re.compile(r"--val-fraction ([\d.e-]+) \(now")


def test_an_empty_val_split_is_said_with_a_fraction_that_gives_one(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """120 documents under the default 0.0005: val.bin is empty. The warning's fraction,
    given back, holds out at least a block."""
    argv = ["tokenize", str(small_corpus), "-j", "1", "-q"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "warning: val.bin is empty (0 documents)" in err and "--split nanogpt" in err
    (fraction,) = VAL_FRACTION.findall(err)
    assert main([*argv, "--out", str(tmp_path / "b"), "--val-fraction", fraction]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err
    val = (tmp_path / "b" / "val.bin").stat().st_size // 2
    assert val >= 1024


def test_nanogpt_s_split_keeps_a_val_document(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tokenize", str(small_corpus), "-j", "1", "-q", "--split", "nanogpt"]
    assert main([*argv, "--out", str(tmp_path / "n")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert (tmp_path / "n" / "val.bin").stat().st_size > 0


@pytest.mark.parametrize(("train", "val"), [(0, 3000), (700, 3000), (3000, 1023)])
def test_a_split_shorter_than_a_block_is_said(
    train: int, val: int, capsys: pytest.CaptureFixture[str]
) -> None:
    meta = {"config": {"dtype": "uint16", "split_rule": "hash", "val_fraction": 0.0005},
            "counts": {"documents": {"train": 1, "val": 1},
                       "tokens": {"train": train, "val": val}, "skipped_members": 0,
                       "skipped_documents": 0, "partial_members": 0},
            "files": ["train.bin", "val.bin"]}  # fmt: skip

    def run(update: Callable[[Progress], None]) -> Report:
        return Report(Path("OUT"), meta)

    assert with_progress(run, quiet=True) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    short = "train" if train < 1024 else "val"
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {short}.bin "), warnings
    assert ("empty" in warnings[0]) == (min(train, val) == 0)


@pytest.mark.parametrize(
    ("take", "said"),
    [(None, "the corpus is too small for both splits"),
     (0, "the run took --take 0 documents: take more")],
)  # fmt: skip
def test_empty_splits_of_a_small_run_say_why(
    take: int | None, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--take 0`` said "the corpus is too small for both splits" of a corpus of 120 documents
    (red team, session 28): a run cut by ``--take`` says so."""
    meta = {"config": {"dtype": "uint16", "split_rule": "nanogpt", "take": take},
            "counts": {"documents": {"train": 0, "val": 0}, "tokens": {"train": 0, "val": 0},
                       "skipped_members": 0, "skipped_documents": 0, "partial_members": 0},
            "files": ["train.bin", "val.bin"]}  # fmt: skip
    assert with_progress(lambda update: Report(Path("OUT"), meta), quiet=True) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 2 and all(line.endswith(f"; {said}") for line in warnings), warnings


@pytest.mark.parametrize(
    ("tokens", "fraction", "said"),
    [({"train": 0, "val": 5}, 0.9, "; the corpus is too small for both splits"),
     ({"train": 40000, "val": 900}, 0.6, "a trainer cannot take a batch from it")],
)  # fmt: skip
def test_a_small_val_split_is_told_to_hold_out_more_only_where_that_helps(
    tokens: dict[str, int], fraction: float, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Red team, session 28: a corpus of one document under ``--val-fraction 0.9`` was told
    "hold out more with --val-fraction 0.5 (now 0.9)", and "(1 documents)"."""
    meta = {"config": {"dtype": "uint16", "split_rule": "hash", "val_fraction": fraction},
            "counts": {"documents": {"train": 40, "val": 1}, "tokens": tokens,
                       "skipped_members": 0, "skipped_documents": 0, "partial_members": 0},
            "files": ["train.bin", "val.bin"]}  # fmt: skip
    assert with_progress(lambda update: Report(Path("OUT"), meta), quiet=True) == 0
    val = [line for line in capsys.readouterr().err.splitlines() if "warning: val.bin" in line]
    assert len(val) == 1 and val[0].endswith(said) and "(1 document)" in val[0], val


def test_a_seed_of_corpus_order_is_refused_and_not_in_the_config(
    small_corpus: Path, tmp_path: Path, owt: Callable[..., Any]
) -> None:
    """``--seed`` with ``--no-shuffle`` orders nothing: refused (exit 2) as ``owt stream``
    refuses it; the API's ``seed`` under ``shuffle=False`` is not in the config, so that
    slices made with and without one merge (their bytes are the same)."""
    ran = owt("tokenize", str(small_corpus), "--out", str(tmp_path / "x"), "--tokenizer",
              "bytes", "--no-shuffle", "--seed", "3", "-q")  # fmt: skip
    assert ran.returncode == 2 and "--no-shuffle keeps corpus order" in ran.stderr
    assert not (tmp_path / "x").exists()
    corpus = Corpus.open(small_corpus)
    options = {"tokenizer": "bytes", "workers": 0, "shuffle": False}
    one = prepare(corpus, tmp_path / "a", PrepareOptions(**options, seed=3), shard=(0, 2))
    two = prepare(corpus, tmp_path / "b", PrepareOptions(**options), shard=(1, 2))
    assert one.meta["config"]["seed"] == two.meta["config"]["seed"] == 0
    from openwebtext.prepare import merge

    whole = prepare(corpus, tmp_path / "whole", PrepareOptions(**options, seed=5))
    assert merge([tmp_path / "a", tmp_path / "b"], tmp_path / "m").meta == whole.meta


def test_a_resumed_run_says_the_skips_it_cannot_name(
    tmp_path: Path, owt: Callable[..., Any]
) -> None:
    """Skips met by the run a resumed one went on from are counted but named only in that
    run's output: said (red team, session 29: counted, never named)."""
    from support import corrupt_member, outer_tar, sample_docs, xz_member

    (tmp_path / "c").mkdir()
    members = [(f"openwebtext/urlsf_subset00-{k}_data.xz",
                corrupt_member(sample_docs(f"m{k}", 3)) if k == 0 else
                xz_member(sample_docs(f"m{k}", 3))) for k in range(4)]  # fmt: skip
    outer_tar(tmp_path / "c" / "urlsf_subset00.tar", members)
    corpus = Corpus.open(tmp_path / "c", on_error="skip")
    options = PrepareOptions(tokenizer="bytes", workers=0, on_error="skip", shuffle=False)

    def stop(event: Progress) -> None:
        if event.phase == "tokenize" and event.done > 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare(corpus, tmp_path / "x", options, progress=stop, checkpoint_seconds=0)
    ran = owt("tokenize", str(tmp_path / "c"), "--out", str(tmp_path / "x"), "--tokenizer",
              "bytes", "--on-error", "skip", "--no-shuffle", "-j", "0")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "1 member," in ran.stderr and "(1 skip not named here" in ran.stderr
    whole = owt("tokenize", str(tmp_path / "c"), "--out", str(tmp_path / "y"), "--tokenizer",
                "bytes", "--on-error", "skip", "--no-shuffle", "-j", "0")  # fmt: skip
    assert "skipped: " in whole.stderr and "not named here" not in whole.stderr
