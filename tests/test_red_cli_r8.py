"""What a red team (session 31) found in ``owt``."""

from __future__ import annotations

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
