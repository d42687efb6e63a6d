"""What ``Stats`` says at the end of a run (issue 22)."""

from __future__ import annotations

from pathlib import Path

from openwebtext import Loader


def test_a_finished_pass_reports_its_count(small_corpus: Path) -> None:
    it = Loader(small_corpus, workers=0, seed=0).iter()
    documents = sum(1 for _ in it)
    assert documents > 0
    assert it.stats.documents == documents
    assert it.stats.epoch_documents == documents  # was 0 once the pass had ended


def test_a_run_of_two_epochs_reports_the_last_pass_and_resumes_nothing(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, seed=0, epochs=2)
    it = loader.iter()
    documents = sum(1 for _ in it)
    assert it.stats.epoch_documents == documents // 2
    state = it.state_dict()
    assert state["counters"].get("epoch_documents", 0) == 0  # at the next epoch's start
    # ... so resuming it with a further epoch reads that whole epoch, not a stale target
    more = Loader(small_corpus, workers=0, seed=0, epochs=3).iter(state=state)
    assert sum(1 for _ in more) == documents // 2


def test_a_run_cut_by_take_reports_the_pass_so_far(small_corpus: Path) -> None:
    it = Loader(small_corpus, workers=0, seed=0, take=7).iter()
    assert sum(1 for _ in it) == 7
    assert it.stats.epoch_documents == 7
