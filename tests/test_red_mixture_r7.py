"""What a red team (session 30) found in mixtures: a part whose documents hold no id was
chosen for ever by tokens and left a packed mixture's batches waiting (a hang); ``reshard`` of
best-fit states resharded again returned states every new rank refused when it opened them,
and refused others as "of different epochs" naming one epoch."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture, Schedule, StateError, reshard
from openwebtext.errors import CorpusError
from openwebtext.synth import write_corpus

EOT = 256  # the bytes tokenizer's


def _datatrove(folder: Path, documents: list[list[int]]) -> Corpus:
    folder.mkdir(parents=True)
    np.array([i for d in documents for i in d], dtype="<u2").tofile(folder / "train.ds")
    ends = np.cumsum([len(d) for d in documents]).astype("<u8")
    ends.tofile(folder / "train.ds.index")
    return Corpus.open_tokens(folder / "train.ds", eot=EOT)


@pytest.fixture
def token_parts(tmp_path: Path) -> dict[str, Corpus]:
    full = _datatrove(tmp_path / "full", [[k % 200 + 1] * 5 + [EOT] for k in range(60)])
    empty = _datatrove(tmp_path / "empty", [[] for _ in range(20)])  # (every document filtered)
    return {"full": full, "empty": empty}


NO_ID = "part 'empty': .*epoch 0 yielded documents of no id: by tokens it would be chosen for ever"


@pytest.mark.timeout(60)
def test_a_part_of_no_id_by_tokens_is_an_error_not_chosen_for_ever(
    token_parts: dict[str, Corpus],
) -> None:
    mixture = Mixture(token_parts, {"full": 0.5, "empty": 0.5}, by="tokens")
    loader = Loader(mixture, workers=0, seed=0, tokenizer="bytes")
    with pytest.raises(CorpusError, match=NO_ID), loader.iter() as docs:
        for _ in range(10_000):  # (it handed out the empty part's documents only, for ever)
            next(docs)


@pytest.mark.timeout(60)
def test_a_packed_mixture_of_no_id_is_an_error_not_a_wait(
    token_parts: dict[str, Corpus],
) -> None:
    mixture = Mixture(token_parts, {"full": 0, "empty": 1})
    loader = Loader(mixture, workers=0, seed=0, tokenizer="bytes")
    with pytest.raises(CorpusError, match=NO_ID), loader.batches(8, 2) as batches:
        next(batches)  # (never came)
    with Loader(Mixture(token_parts, {"full": 1, "empty": 0}), workers=0, seed=0,
                tokenizer="bytes").batches(8, 2) as batches:  # fmt: skip
        assert next(batches).shape == (2, 9)  # (a part of no weight is never read)


@pytest.fixture(scope="module")
def parts(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("parts")
    shutil.copytree(small_corpus, root / "small")  # (its counts are written beside it)
    write_corpus(root / "books", subsets=1, members=2, docs=40, seed=1, workers=1)
    write_corpus(root / "tiny", subsets=1, members=1, docs=3, seed=2, workers=1)
    return {"a": str(root / "small"), "b": str(root / "books"), "t": str(root / "tiny")}


def _run(mixture: Mixture, world: int, stops: list[int], batches: dict[str, Any], seed: int,
         states: list[Any] | None = None) -> list[Any]:  # fmt: skip
    out = []
    for rank, stop in enumerate(stops):
        loader = Loader(mixture, workers=0, seed=seed, rank=rank, world_size=world, even=None,
                        tokenizer="bytes")  # fmt: skip
        with loader.batches(**batches, state=None if states is None else states[rank]) as it:
            for _ in range(stop):
                next(it)
            out.append(it.state_dict())
    return out


def test_a_window_crossing_a_part_s_epoch_end_resharded_again_is_refused_by_reshard(
    parts: dict[str, str],
) -> None:
    """``reshard`` returned 3 states; each new rank refused its own when it opened it."""
    mixture = Mixture(parts, {"a": 0.2, "b": 0.5, "t": 0.3},
                      schedule=[(7, {"a": 0.25, "b": 0.5, "t": 0.25})])  # fmt: skip
    shape = dict(segments=True, packing="bestfit", window=3,
                 schedule=Schedule([(0, 256, 4), (50, 1024, 2), (89, 128, 8)]))  # fmt: skip
    first = reshard(_run(mixture, 2, [109, 118], shape, 0), 3, even=None)
    states = _run(mixture, 3, [30, 39, 11], shape, 0, first)
    with pytest.raises(StateError, match="old rank 0's best-fit window crosses its part's epoch "
                       "end, in states resharded again"):  # fmt: skip
        reshard(states, 3, even=None)


def test_rests_of_later_epochs_left_by_a_reshard_are_said_so(parts: dict[str, str]) -> None:
    """The refusal said "states of different epochs (rank: epoch {0: 0, 1: 0})"."""
    mixture = Mixture(parts, {"a": 0.2, "b": 0.5, "t": 0.3},
                      schedule=[(7, {"a": 0.25, "b": 0.5, "t": 0.25})])  # fmt: skip
    shape = dict(segments=True, packing="bestfit", window=7,
                 schedule=Schedule([(0, 256, 4), (41, 1024, 2), (72, 128, 8)]))  # fmt: skip
    first = reshard(_run(mixture, 2, [9, 72], shape, 7), 2, even=None)
    states = _run(mixture, 2, [0, 26], shape, 7, first)
    for world in (2, 1):
        with pytest.raises(StateError, match=r"part 't': the states still have rests of epochs "
                           r"\[1, 2\] to hand out after epoch 0's") as caught:  # fmt: skip
            reshard(states, world, even=None)
        assert "different epochs (rank" not in str(caught.value)
