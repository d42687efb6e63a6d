"""What a red team (session 31) found in ``owt``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from openwebtext.synth import write_corpus
from support import Owt


def test_merge_and_bench_refuse_an_out_that_holds_corpus_files(owt: Owt, tmp_path: Path) -> None:
    """``owt tokenize`` refused it; ``owt merge`` wrote train.bin beside the tars (read with
    them next time) and ``owt bench`` its results."""
    corpus = write_corpus(tmp_path / "c", subsets=2, members=1, docs=3, seed=0, workers=1).path
    slices = [str(tmp_path / f"s{k}") for k in range(2)]
    for k, out in enumerate(slices):
        ran = owt("tokenize", str(corpus), "--out", out, "--shard", f"{k}/2", "--tokenizer",
                  "bytes", "-q")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    before = sorted(p.name for p in corpus.iterdir())
    for argv in (["merge", *slices], ["bench", str(corpus), "--workers", "1"]):
        ran = owt(*argv, "--out", str(corpus), "-q")
        assert ran.returncode == 2, (argv, ran.stderr)
        assert f"--out {corpus} holds corpus files (urlsf_subset00.tar and 1 more)" in ran.stderr
    assert sorted(p.name for p in corpus.iterdir()) == before
    assert owt("merge", *slices, "--out", str(tmp_path / "m"), "-q").returncode == 0


def test_an_output_stream_open_for_reading_only_is_taken_as_closed(tmp_path: Path) -> None:
    """A closed stderr's number taken before ``owt`` ran (a pyenv shim's script takes it, read
    only): the summary's write failed, and a whole run exited 1."""
    corpus = write_corpus(tmp_path / "c", subsets=1, members=1, docs=3, seed=0, workers=1).path
    script = tmp_path / "script.txt"
    script.write_text("a script\n")
    with script.open("rb") as read_only:
        ran = subprocess.run([sys.executable, "-m", "openwebtext.cli", "stream", str(corpus),
                              "--take", "2", "-q"], stderr=read_only, stdout=subprocess.PIPE,
                             timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 0
    assert script.read_text() == "a script\n"
    with script.open("rb") as read_only:
        argv = [sys.executable, "-m", "openwebtext.cli", "stream", str(corpus), "--jsonl"]
        ran = subprocess.run(argv, stdout=read_only, stderr=subprocess.PIPE, text=True,
                             timeout=120, check=False)  # fmt: skip
    assert ran.returncode == 1 and "standard output is closed" in ran.stderr
