"""``reshard(states, world_size, rank=r)``: one new rank's state, the very state the whole
reshard gives rank ``r``, for every kind of state (a corpus's documents, its concat and
best-fit batches; a mixture's documents, its concat and best-fit batches). Every new state
holds what it needs of every old rank's, so making all of them costs old ranks × new ranks
(a red team measured 2,000 → 2,000 ranks: 1.6 s and 0.8 GB in every process that called
it); a rank making its own costs old ranks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, Mixture, reshard
from tables_support import mixture_folders

OLD = 4


def _state(loader: Loader, n: int, packing: str | None) -> dict[str, Any]:
    """The state after ``n`` documents (no packing) or batches (``packing``)."""
    if packing is None:
        with loader.iter() as it:
            for _ in zip(range(n), it, strict=False):
                pass
            return json.loads(json.dumps(it.state_dict()))
    extra = {"window": 5} if packing == "bestfit" else {}
    with loader.batches(seq_len=127, batch_size=2, packing=packing, **extra) as it:
        for _ in zip(range(n), it, strict=False):
            pass
        return json.loads(json.dumps(it.state_dict()))


@pytest.fixture(scope="module")
def parts(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return mixture_folders(small_corpus, tmp_path_factory.mktemp("mix"))


@pytest.mark.parametrize("packing", [None, "concat", "bestfit"])
@pytest.mark.parametrize("mixed", [False, True])
def test_one_rank_s_state_is_the_whole_reshard_s(
    parts: dict[str, str], packing: str | None, mixed: bool
) -> None:
    source: Any = Mixture(parts, {"web": 0.6, "pq": 0.4, "js": 0.0}) if mixed else parts["web"]
    states = []
    for rank in range(OLD):
        loader = Loader(source, workers=0, seed=5, rank=rank, world_size=OLD, even=None,
                        epochs=None, tokenizer="bytes")  # fmt: skip
        states.append(_state(loader, (1, 2, 0, 3)[rank], packing))
    for world in (1, 3, 6):
        every = reshard(states, world)
        for rank in range(world):
            assert reshard(states, world, rank=rank) == every[rank]


@pytest.mark.parametrize("rank", [-1, 3, True, 1.5, "0", None])
def test_a_rank_not_of_the_new_world_is_refused(small_corpus: Path, rank: Any) -> None:
    state = _state(Loader(small_corpus, workers=0), 2, None)
    if rank is None:
        assert isinstance(reshard([state], 3, rank=rank), list)
        return
    with pytest.raises(ValueError, match=r"rank must be an int from 0 to world_size - 1 \(2\)"):
        reshard([state], 3, rank=rank)
