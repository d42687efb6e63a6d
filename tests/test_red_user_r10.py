"""What a new user's walk through the guides (session 33) found."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from openwebtext import prepare
from openwebtext.index import Corpus
from openwebtext.loader import Loader
from openwebtext.synth import write_corpus
from support import Owt


def test_tokenize_refuses_an_out_that_holds_another_corpus_s_files(
    owt: Owt, tmp_path: Path
) -> None:
    """cli.md: an ``--out`` that holds corpus files is refused (exit 2). ``owt tokenize``
    refused only the folder of the corpus it read, and wrote train.bin and meta.json beside
    another corpus's tar (read with it next time)."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=1, docs=3, seed=0, workers=1).path
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(corpus / "urlsf_subset00.tar", target / "urlsf_subset07.tar")
    for extra in ([], ["--shard", "0/2"]):
        ran = owt("tokenize", str(corpus), "--out", str(target), "--tokenizer", "bytes", "-q",
                  *extra)  # fmt: skip
        assert ran.returncode == 2, ran.stderr
        assert f"--out {target} holds corpus files (urlsf_subset07.tar)" in ran.stderr
    with pytest.raises(ValueError, match="holds corpus files"):
        prepare.prepare(Corpus.open(corpus), target, prepare.PrepareOptions(tokenizer="bytes"))
    assert sorted(p.name for p in target.iterdir()) == ["urlsf_subset07.tar"]


def test_a_resumed_best_fit_run_times_the_window_it_reads_again(
    owt: Owt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary of ``owt stream --pack bestfit --resume`` counted the documents of the
    window ``Loader.batches`` reads again as it opens, but timed only what came after: a
    rate many times the machine's. Opening the batches is made to take 1 s here: the
    summary's time counts it."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=2, docs=30, seed=0, workers=1).path
    state = tmp_path / "state.json"
    flags = ["--pack", "bestfit", "--tokenizer", "bytes", "--seq-len", "64", "--window", "20",
             "-j", "0", "-q"]  # fmt: skip
    first = owt("stream", str(corpus), *flags, "--take", "25", "--state-out", str(state))
    assert first.returncode == 0, first.stderr
    opening = Loader.batches

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.0)
        return opening(*args, **kwargs)

    monkeypatch.setattr(Loader, "batches", slow)
    ran = owt("stream", str(corpus), *flags, "--resume", str(state))
    assert ran.returncode == 0, ran.stderr
    said = re.search(r"^read [\d,]+ documents .* in ([\d.]+) s", ran.stderr, re.MULTILINE)
    assert said is not None, ran.stderr
    assert float(said.group(1)) >= 1.0, ran.stderr


def test_the_summary_counts_a_member_cut_short(owt: Owt, tmp_path: Path) -> None:
    """reliability.md: ``owt stream --on-error skip`` prints the run's counts in its summary
    line; a member cut short (its documents before the cut read) was only in the names."""
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.writelines(json.dumps({"text": f"document {k} " * 40}) + "\n" for k in range(200))
    path.write_bytes(path.read_bytes()[:-200])
    ran = owt("stream", str(path), "--on-error", "skip", "-j", "0", "-q")
    assert ran.returncode == 0, ran.stderr
    assert "; 1 member cut short (the documents before the cut read)" in ran.stderr
    assert "  skipped: " in ran.stderr
