"""The owt command: stream (jsonl, summary, resume across runs), index, synth."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Corpus
from openwebtext.cli import main
from support import (
    Owt,
    corrupt_member,
    cut_member,
    docs_before_cut,
    interrupt_owt,
    jsonl_names,
    outer_tar,
    sample_docs,
    xz_member,
)
from test_cli_hostile import sigint_default


def test_stream_jsonl_and_summary(owt: Owt, small_corpus: Path, small_docs: dict[str, str]) -> None:
    proc = owt("stream", str(small_corpus), "-j", "2", "--jsonl")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {r["name"]: r["text"] for r in records} == small_docs
    assert set(records[0]) == {"subset", "member", "name", "text"}
    assert "120 documents" in proc.stderr and "documents/s" in proc.stderr and "MB/s" in proc.stderr


def test_stream_stops_and_continues_exactly(owt: Owt, small_corpus: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    full = jsonl_names(
        owt("stream", str(small_corpus), "--seed", "9", "--jsonl", "--epochs", "2").stdout
    )
    first = owt(
        "stream",
        str(small_corpus),
        "--seed",
        "9",
        "--epochs",
        "2",
        "--jsonl",
        "--take",
        "150",
        "--state-out",
        str(state),
    )
    assert first.returncode == 0
    assert json.loads(state.read_text())["counters"].get("documents", 0) == 150
    # The shaping options come back from the state; -j may change.
    rest = owt(
        "stream", str(small_corpus), "--resume", str(state), "--epochs", "2", "-j", "3", "--jsonl"
    )
    assert rest.returncode == 0, rest.stderr
    assert jsonl_names(first.stdout) + jsonl_names(rest.stdout) == full
    clash = owt("stream", str(small_corpus), "--resume", str(state), "--seed", "1", "-q")
    assert clash.returncode == 1 and "seed: saved 9, now 1" in clash.stderr


def _unread(state: Any) -> Any:
    """``state`` without its counters' ``units``."""
    if not isinstance(state, dict):
        return state
    return {k: _unread(v) for k, v in state.items() if k != "units" or "documents" not in state}


@pytest.mark.parametrize("kind", ["documents", "mixture", "batches"])
def test_a_resume_alone_goes_on_to_the_end_of_the_run_it_resumes(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    # A run of 2 epochs stopped in its first, resumed with --resume alone: its second epoch
    # too (it stopped at the first's end: --epochs was taken as its default, 1).
    what = {
        "documents": [str(small_corpus)],
        "mixture": ["--mix", f"a={small_corpus}/urlsf_subset00.tar:0.5",
                    "--mix", f"b={small_corpus}/urlsf_subset01.tar:0.5"],
        "batches": [str(small_corpus), "--pack", "concat", "--tokenizer", "bytes",
                    "--seq-len", "64", "--batch-size", "2"],
    }[kind]  # fmt: skip
    out = [] if kind == "batches" else ["--jsonl"]
    whole_end, first_end, rest_end = (tmp_path / f"{n}.json" for n in ("whole", "first", "rest"))

    def run(*argv: str | Path) -> list[str]:
        assert main(["stream", *what, "-j", "0", "-q", *out, *map(str, argv)]) == 0
        return jsonl_names(capsys.readouterr().out)

    whole = run("--seed", "9", "--epochs", "2", "--state-out", whole_end)
    first = run("--seed", "9", "--epochs", "2", "--take", "50", "--state-out", first_end)
    rest = run("--resume", first_end, "--state-out", rest_end)
    assert first + rest == whole
    # (but the units read: a resumed run reads its block's again, reliability.md)
    assert _unread(json.loads(rest_end.read_text())) == _unread(json.loads(whole_end.read_text()))
    # Given, --epochs is the resumed run's own: 0 is without end, 1 ends at the first's end.
    assert len(run("--resume", first_end, "--epochs", "0", "--take", "300")) == 300 * bool(out)
    assert run("--resume", first_end, "--epochs", "1") == whole[50 : len(whole) // 2] * bool(out)


def test_ctrl_c_still_writes_the_state(small_corpus: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with sigint_default():
        code, err, left = interrupt_owt(
            [
                "stream",
                str(small_corpus),
                "--jsonl",
                "--shuffle-buffer",
                "0",
                "--state-out",
                str(state),
            ],
            processes=2,
        )
    assert code == 130, err
    assert left == []
    saved = json.loads(state.read_text())
    assert 0 < saved["counters"].get("documents", 0) < 120


def test_index_then_even_ranks(owt: Owt, small_corpus: Path, tmp_path: Path) -> None:
    import shutil

    corpus = shutil.copytree(small_corpus, tmp_path / "c")
    first = owt("stream", str(corpus), "--world-size", "4", "--rank", "0", "-q")
    assert first.returncode == 0, first.stderr  # counts on first use, and caches them
    assert "already indexed" in owt("index", str(corpus)).stderr
    counts = [
        len(
            owt(
                "stream", str(corpus), "--world-size", "4", "--rank", str(r), "--jsonl"
            ).stdout.splitlines()
        )
        for r in range(4)
    ]
    assert len(set(counts)) == 1 and counts[0] > 0


def test_bad_path_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stream", str(tmp_path / "missing")]) == 1
    assert "no such file or folder" in capsys.readouterr().err


def test_synth_writes_a_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "synth"
    assert main(["synth", str(out), "--subsets", "1", "--members", "2", "--docs", "3", "-q"]) == 0
    assert (out / "urlsf_subset00.tar").exists()
    assert "wrote 6 documents" in capsys.readouterr().err
    assert main(["synth", str(out), "--subsets", "1", "--members", "2", "--docs", "3", "-q"]) == 1


@pytest.fixture
def damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, int]:
    """An outer tar: a good member, a corrupt one, one cut short, a good one; and how many
    documents of the cut one precede the cut."""
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "cache"))
    cut = cut_member(sample_docs("d", 5))
    members = [
        ("a_data.xz", xz_member(sample_docs("a", 3))),
        ("c_data.xz", corrupt_member(sample_docs("c", 5))),
        ("d_data.xz", cut),
        ("b_data.xz", xz_member(sample_docs("b", 4))),
    ]
    (tmp_path / "corpus").mkdir()
    return outer_tar(tmp_path / "corpus" / "bad.tar", members), len(docs_before_cut(cut))


def test_index_raises_on_a_damaged_member_as_the_other_commands(
    owt: Owt,
    damaged: tuple[Path, int],
) -> None:
    tar, _ = damaged
    proc = owt("index", str(tar), "-j", "2", "-q")
    assert proc.returncode == owt("stream", str(tar), "-j", "2", "-q").returncode == 1
    assert proc.stderr.startswith(f"owt: error: {tar}[c_data.xz]: cannot count documents: ")
    assert "Traceback" not in proc.stderr
    assert Corpus.open(tar).load_counts() is None  # nothing cached


@pytest.mark.parametrize("policy", ["skip", "warn"])
def test_index_under_skip_counts_what_a_skipping_stream_reads(
    owt: Owt, damaged: tuple[Path, int], policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Skipped members are named and counted in the summary; the counts cached are what a
    stream under skip reads; a stream under raise still meets the damage under its policy."""
    tar, before_cut = damaged
    proc = owt("index", str(tar), "-j", "2", "-q", "--on-error", policy)
    assert proc.returncode == 0, proc.stderr
    assert f"{3 + before_cut + 4} documents in 4 members" in proc.stderr
    assert "skipped 1 member; 1 member cut short" in proc.stderr
    for member in ("c_data.xz", "d_data.xz"):
        assert f"  skipped: {tar}[{member}]: " in proc.stderr
    # warn also logs each as it happens (on stderr, when nothing else handles the log)
    warned = [r.levelno for r in caplog.records if r.getMessage().startswith("skipped: ")]
    assert warned == ([logging.WARNING] * 2 if policy == "warn" else [])
    counts = Corpus.open(tar).load_counts()
    assert counts is not None and counts.documents == (3, 0, before_cut, 4)
    even = ("--world-size", "2", "--even", "pad")
    ranks = [owt("stream", str(tar), *even, "--rank", r, "--on-error", "skip", "--jsonl")
             for r in "01"]  # fmt: skip
    assert [p.returncode for p in ranks] == [0, 0], ranks[0].stderr
    kept = [jsonl_names(p.stdout) for p in ranks]
    assert len(kept[0]) == len(kept[1]) and len(set(kept[0] + kept[1])) == 3 + before_cut + 4
    strict = [owt("stream", str(tar), *even, "--rank", r, "-q") for r in "01"]
    failed = [p.stderr for p in strict if p.returncode == 1]
    assert failed and all(e.startswith(f"owt: error: {tar}[") for e in failed)
    assert all(p.returncode in (0, 1) and "Traceback" not in p.stderr for p in strict)
