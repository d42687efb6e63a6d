"""A state refused as saved for another run says so by ``StateError.mismatch``, not by its
words: what ``owt`` hints and ``reshard_loader_states`` adds read the error's attributes (the
session 30 note left both recognising message text)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from openwebtext import Loader
from openwebtext.errors import StateError
from openwebtext.synth import write_corpus
from support import Owt


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mismatch") / "c"
    return write_corpus(folder, subsets=1, members=2, docs=5, seed=0, workers=1).path


def _refused(make) -> StateError:  # type: ignore[no-untyped-def]
    with pytest.raises(StateError) as info:
        make()
    return info.value


def test_each_state_of_another_run_is_a_mismatch_and_a_damaged_one_is_not(corpus: Path) -> None:
    loader = Loader(str(corpus), seed=0, workers=0, tokenizer="bytes")
    batches = loader.batches(seq_len=16, batch_size=2)
    next(batches)
    saved = batches.state_dict()
    other = {
        "seed": lambda: next(iter(Loader(str(corpus), seed=1, workers=0, tokenizer="bytes")
                                  .batches(seq_len=16, batch_size=2, state=saved))),
        "seq_len": lambda: next(loader.batches(seq_len=8, batch_size=2, state=saved)),
        "packing": lambda: next(loader.batches(seq_len=16, batch_size=2, state=saved,
                                               packing="bestfit", window=4)),
    }  # fmt: skip
    for field, make in other.items():
        exc = _refused(make)
        assert exc.mismatch and exc.field.endswith(field), (field, exc, exc.field)
        again = pickle.loads(pickle.dumps(exc))
        assert (type(again), str(again), again.field, again.mismatch) == (
            StateError, str(exc), exc.field, True)  # fmt: skip
    damaged = {**saved, "seq_len": -1}
    exc = _refused(lambda: next(loader.batches(seq_len=16, batch_size=2, state=damaged)))
    assert exc.field == "seq_len" and not exc.mismatch


def test_a_damaged_state_whose_value_says_saved_for_gets_no_flags(
    owt: Owt, tmp_path: Path, corpus: Path
) -> None:
    """Before, a damaged field whose message held "was saved for" was given a resume hint."""
    state = tmp_path / "s.json"
    flags = ["--tokenizer", "bytes", "--pack", "bestfit", "--seq-len", "16", "--batch-size", "2",
             "--window", "5"]  # fmt: skip
    assert owt("stream", str(corpus), *flags, "--take", "3", "--state-out", str(state),
               "-q").returncode == 0  # fmt: skip
    edited = {**json.loads(state.read_text()), "packing": "the state was saved for"}
    state.write_text(json.dumps(edited))
    refused = owt("stream", str(corpus), *flags, "--resume", str(state), "-q")
    assert refused.returncode == 1 and "packing" in refused.stderr, refused.stderr
    assert "to resume it" not in refused.stderr


def test_a_rank_given_twice_to_reshard_loader_states_is_said_in_shares(corpus: Path) -> None:
    """Before, only "ranks missing" (found by its words) was said in DataLoader shares."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from openwebtext.torch import OpenWebTextDataset, reshard_loader_states

    dataset = OpenWebTextDataset(str(corpus), seed=0, workers=0, rank=0, world_size=2, even=None)
    loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(StateError, match=r"two states of rank 0 .*\(here a rank is a share: old "
                       r"rank \* its DataLoader workers \+ worker"):  # fmt: skip
        reshard_loader_states([state, state], 1, 0)
