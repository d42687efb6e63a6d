"""What a resume must carry over, pinned (issue 19): the batches a ``Batches`` has handed out,
and a PyTorch dataset's next epoch after a resumed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import Loader


def test_batches_count_what_they_handed_out_across_a_resume(small_corpus: Path) -> None:
    loader = Loader(small_corpus, workers=0, seed=0, tokenizer="bytes")
    with loader.batches(seq_len=64, batch_size=2) as batches:
        for _ in range(3):
            next(batches)
        state = batches.state_dict()
    assert state["batches"] == 3
    with loader.batches(seq_len=64, batch_size=2, state=state) as resumed:
        assert resumed.state_dict()["batches"] == 3  # before it hands out anything
        for _ in range(2):
            next(resumed)
        assert resumed.state_dict()["batches"] == 5
        again = resumed.state_dict()
    with loader.batches(seq_len=64, batch_size=2, state=again) as twice:
        next(twice)
        assert twice.state_dict()["batches"] == 6


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_resumed_then_iterated_again_reads_a_whole_epoch(
    indexed: Path, workers: int
) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from openwebtext.torch import OpenWebTextDataset

    def make() -> object:
        dataset = OpenWebTextDataset(indexed, seed=3, shuffle_buffer=30)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=workers)

    full = [doc.name for doc in make()]  # type: ignore[attr-defined]
    loader = make()
    seen = []
    for doc in loader:  # type: ignore[attr-defined]
        seen.append(doc.name)
        if len(seen) == 17:
            break
    state = loader.state_dict()  # type: ignore[attr-defined]
    resumed = make()
    resumed.load_state_dict(state)  # type: ignore[attr-defined]
    rest = [doc.name for doc in resumed]  # type: ignore[attr-defined]
    assert len(rest) == len(full) - 17 and sorted(seen + rest) == sorted(full)
    nxt = [doc.name for doc in resumed]  # type: ignore[attr-defined]
    assert len(nxt) == len(full)  # a whole epoch, not the resumed remainder again
    assert sorted(nxt) == sorted(full)
