"""Progress of a resumed run counts this run's work only (issue 19): its tokens per second
are this run's tokens over this run's seconds, never the earlier run's tokens too."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareOptions, Progress, prepare


class _Stop(KeyboardInterrupt):
    pass


def test_a_run_resumed_in_its_permutation_counts_only_the_tokens_it_copies(
    small_corpus: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(split_rule="nanogpt", tokenizer="bytes", workers=0, val_fraction=0.1)

    def stop_after_val(event: Progress) -> None:
        if event.phase == "permute":  # the first chunk copied is val.bin's
            raise _Stop

    with pytest.raises(_Stop):
        prepare(corpus, tmp_path, options, progress=stop_after_val, checkpoint_seconds=0)
    events: list[Progress] = []
    report = prepare(corpus, tmp_path, options, progress=events.append)
    assert report.resumed
    permuted = [e for e in events if e.phase == "permute"]
    assert permuted and permuted[-1].done == permuted[-1].total  # val.bin's bytes included
    assert permuted[-1].tokens == report.meta["counts"]["tokens"]["train"]  # but not its tokens


def test_a_resumed_run_reports_only_the_tokens_it_tokenized(
    small_corpus: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open(small_corpus)
    options = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1, shuffle=False)
    seen: list[Progress] = []

    def stop_after_two_units(event: Progress) -> None:
        seen.append(event)
        if len(seen) == 2:
            raise _Stop

    with pytest.raises(_Stop):
        prepare(corpus, tmp_path, options, progress=stop_after_two_units, checkpoint_seconds=0)
    events: list[Progress] = []
    report = prepare(corpus, tmp_path, options, progress=events.append)
    total = sum(report.meta["counts"]["tokens"].values())
    assert report.resumed and 0 < events[-1].tokens == report.tokenized < total
    assert report.tokenized + seen[-1].tokens == total  # the two runs' shares
    fresh = prepare(corpus, tmp_path / "fresh", options)
    assert fresh.tokenized == total and prepare(corpus, tmp_path / "fresh", options).tokenized == 0
