"""A mixture through PyTorch: 2 ranks x 2 DataLoader workers each take their share of every part
(the mixture's documents once per part epoch across the 4 shares), and a StatefulDataLoader over
packed batches of a mixture resumes exactly."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext import Loader, Mixture  # noqa: E402
from openwebtext.torch import (  # noqa: E402
    OpenWebTextDataset,
    PackedBatchDataset,
    reshard_loader_states,
)
from tables_support import mixture_folders  # noqa: E402

WEIGHTS = {"web": 0.5, "pq": 0.3, "js": 0.2}


@pytest.fixture(scope="module")
def mixture(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Mixture:
    return Mixture(mixture_folders(small_corpus, tmp_path_factory.mktemp("mixtorch")), WEIGHTS)


def test_two_ranks_of_two_workers_share_every_part(mixture: Mixture) -> None:
    """web (120 documents at 0.5) ends each share's run last: its epoch is read once across the
    4 shares; pq and js are read at least once (repeated meanwhile)."""
    read: list[Any] = []
    for rank in range(2):
        dataset = OpenWebTextDataset(mixture, seed=2, rank=rank, world_size=2, even=None)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        read += list(loader)
    web = [d.name for d in read if d.source == "web"]
    assert len(web) == len(set(web)) == 120
    for name, size in (("pq", 50), ("js", 30)):
        assert len({d.name for d in read if d.source == name}) == size
    counts = collections.Counter(d.source for d in read)
    assert counts["pq"] > counts["js"]


@pytest.mark.parametrize(
    "num_workers", [0, pytest.param(2, marks=pytest.mark.slow)]  # 2: ~15 s of DataLoader IPC
)
def test_packed_batches_of_a_mixture_resume_under_stateful_dataloader(
    mixture: Mixture, num_workers: int
) -> None:
    def make() -> Any:
        dataset = PackedBatchDataset(
            mixture, 256, 4, workers=0, seed=3, tokenizer="bytes", packing="bestfit", window=64
        )
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers)

    full = [b.tolist() for b in make()]
    for cut in (21,) if num_workers else (1, 21):
        loader = make()
        head = []
        for batch in loader:
            head.append(batch.tolist())
            if len(head) == cut:
                break
        state = json.loads(json.dumps(loader.state_dict()))
        resumed = make()
        resumed.load_state_dict(state)
        assert head + [b.tolist() for b in resumed] == full, cut


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_batches_of_a_mixture_reshard_to_another_world_and_num_workers(
    mixture: Mixture, packing: str
) -> None:
    """2 ranks stopped at different steps, their StatefulDataLoader states resharded onto 1
    rank of 2 DataLoader workers: its batches are those of ``Loader.batches`` from each
    resharded share, round robin (best fit: each old rank's window dealt to one share)."""
    opts: dict[str, Any] = {"seed": 3, "tokenizer": "bytes", "even": None, "epochs": None,
                            "packing": packing}  # fmt: skip
    if packing == "bestfit":
        opts["window"] = 16
    states = []
    for rank, steps in enumerate((2, 5)):
        dataset = PackedBatchDataset(mixture, 64, 2, workers=0, rank=rank, world_size=2, **opts)
        loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
        for _ in zip(range(steps), loader, strict=False):
            pass
        states.append(json.loads(json.dumps(loader.state_dict())))
    (shares,) = reshard_loader_states(states, 1, 2)
    dataset = PackedBatchDataset(mixture, 64, 2, workers=0, **opts)
    dataset.load_resharded(shares)
    loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=2)
    got = [b.tolist() for _, b in zip(range(6), loader, strict=False)]
    per_share = []
    for r, state in enumerate(shares):
        loader_opts = {k: v for k, v in opts.items() if k not in ("packing", "window")}
        with Loader(mixture, workers=0, rank=r, world_size=2, **loader_opts).batches(
            64, 2, state=state, **{k: opts[k] for k in opts.keys() - loader_opts.keys()}
        ) as batches:
            per_share.append([next(batches).tolist() for _ in range(3)])
    assert got == [per_share[k % 2][k // 2] for k in range(6)]


def test_the_device_stage_changes_a_mixture_s_weights_as_its_batches_do(mixture: Mixture) -> None:
    """``to_device(batches).set_weights`` is ``Ahead``'s: the batches made and copied ahead
    are made again, and the tensors are the batches of the iterator changed in place."""
    from openwebtext.torch import to_device

    loader = Loader(mixture, workers=0, seed=4, tokenizer="bytes", epochs=None)
    new = {"web": 0.1, "pq": 0.1, "js": 0.8}

    def run(stage: bool) -> list[Any]:
        batches: Any = loader.batches(128, 2, packing="bestfit", window=4)
        out = []
        with to_device(batches, "cpu", depth=3) if stage else batches as it:
            for i in range(16):
                if i == 5:
                    it.set_weights(new)
                batch = next(it)
                out.append(batch.numpy().tobytes() if stage else batch.tobytes())
        return out

    assert run(True) == run(False)
