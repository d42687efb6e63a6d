"""PyTorch and issue 21: PackedBatchDataset with segments and best fit, the SDPA mask and
FlashAttention's cu_seqlens from segment ids, and StatefulDataLoader states resharded to
another world size and another num_workers."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")

from openwebtext import Corpus, Loader  # noqa: E402
from openwebtext.stream import count_documents  # noqa: E402
from openwebtext.torch import (  # noqa: E402
    PackedBatchDataset,
    document_cu_seqlens,
    document_mask,
    loader_dataset_states,
    reshard_loader_states,
)
from support import fit_window  # noqa: E402

S, B = 32, 2
OPTIONS: dict[str, Any] = dict(
    tokenizer="bytes", seed=3, shuffle_buffer=30, split="train", val_fraction=0.2, val_seed=7,
    even="drop",
)  # fmt: skip


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory, small_corpus: Path) -> Path:
    path = Path(shutil.copytree(small_corpus, tmp_path_factory.mktemp("varied") / "c"))
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=1, splits=((0.0005, 2357), (0.2, 7))))
    return path


def test_document_mask_is_attention_within_each_document() -> None:
    segments = torch.tensor([[1, 1, 2, 2, 2, 0], [1, 2, 3, 3, 0, 0]])
    mask = document_mask(segments)
    assert mask.shape == (2, 1, 6, 6)
    for b in range(2):
        for i in range(6):
            for j in range(6):
                si, sj = int(segments[b, i]), int(segments[b, j])
                want = i == j if si == 0 else (si == sj and j <= i)
                assert bool(mask[b, 0, i, j]) == want
    # SDPA under the mask: each document attends as if it were alone.
    q = torch.randn(2, 1, 6, 8)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask)
    alone = torch.nn.functional.scaled_dot_product_attention(
        q[:1, :, 2:5], q[:1, :, 2:5], q[:1, :, 2:5], is_causal=True
    )
    assert torch.allclose(out[:1, :, 2:5], alone, atol=1e-6)
    assert not out.isnan().any()
    assert document_cu_seqlens(segments).tolist() == [0, 2, 5, 6, 7, 8, 10, 12]


@pytest.mark.parametrize("packing", ["concat", "bestfit"])
def test_packed_batch_dataset_gives_segments(packing: str, varied: Path) -> None:
    fits = {"packing": packing, "window": fit_window(packing, 20)}
    dataset = PackedBatchDataset(varied, S, B, segments=True, **fits, **OPTIONS)
    got = list(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0))
    want = list(Loader(varied, **OPTIONS).batches(S, B, segments=True, **fits))
    assert len(got) == len(want) > 0
    for item, batch in zip(got, want, strict=True):
        assert set(item) == {"tokens", "segment_ids", "positions"}
        for name in item:
            assert (item[name].numpy() == getattr(batch, name)).all()


def run_ranks(
    corpus: Path, world: int, num_workers: int, steps: list[int] | None,
    shares: list[list[dict[str, Any]]] | None = None, packing: str = "concat",
) -> tuple[list[list[Any]], list[dict[str, Any]]]:  # fmt: skip
    """Each rank's batches (up to ``steps[rank]``; None: all) and its loader's state."""
    batches, states = [], []
    for rank in range(world):
        dataset = PackedBatchDataset(
            corpus, S, B, rank=rank, world_size=world, workers=0, packing=packing,
            window=fit_window(packing, 7),
            **OPTIONS,
        )  # fmt: skip
        if shares is not None:
            dataset.load_resharded(shares[rank])
        loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=num_workers)
        got = []
        for batch in loader if steps is None or steps[rank] else ():
            got.append(batch.numpy().tolist())
            if steps is not None and len(got) >= steps[rank]:
                break
        batches.append(got)
        states.append(json.loads(json.dumps(loader.state_dict())))
    return batches, states


@pytest.mark.parametrize(
    ("world", "num_workers", "new_workers", "packing"),
    [
        # ~25 s each: 4 -> 3 ranks onto workers in the slow group (the default run reshards
        # onto workers in test_mixture_torch's 2 -> 1 x 2 case, and 2 x 2 -> 3 x 0 here)
        pytest.param(4, 0, 2, "concat", marks=pytest.mark.slow),
        (2, 2, 0, "concat"),
        pytest.param(4, 0, 2, "bestfit", marks=pytest.mark.slow),
        (2, 2, 0, "bestfit"),
    ],
)
def test_stateful_dataloader_resumes_on_another_world_and_num_workers(
    world: int, num_workers: int, new_workers: int, packing: str, varied: Path
) -> None:
    """Ranks stop at different steps; 3 ranks with another num_workers go on: each new
    share's batches are those of ``Loader.batches`` from its resharded state, round robin.
    (The small corpus has 6 members: at most 6 shares, ranks x workers.)"""
    _, states = run_ranks(
        varied, world, num_workers, [0, 1, 3, 2][:world] if world == 4 else [1, 3],
        packing=packing,
    )  # fmt: skip
    assert len(loader_dataset_states(states[0])) == max(1, num_workers)
    shares = reshard_loader_states(states, 3, new_workers)
    assert [len(s) for s in shares] == [max(1, new_workers)] * 3
    got, _ = run_ranks(varied, 3, new_workers, None, shares, packing)
    for rank in range(3):
        per_share = []
        for r, state in enumerate(shares[rank]):
            opts = {
                **OPTIONS,
                "rank": rank * len(shares[rank]) + r,
                "world_size": 3 * len(shares[rank]),
            }
            with Loader(varied, **opts).batches(
                S, B, state=state, packing=packing, window=fit_window(packing, 7)
            ) as batches:
                per_share.append([b.tolist() for b in batches])
        want = []  # the DataLoader's round robin over its workers, until one runs out
        for k in range(max(len(p) for p in per_share)):
            want += [p[k] for p in per_share if k < len(p)]
        assert got[rank] == want
        assert np.array(got[rank]).shape[1:] == (B, S + 1)  # not empty


SAME_STEPS = """
import json, sys
import torch.distributed as dist
from openwebtext import Loader
from openwebtext.torch import same_steps
corpus, port, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
loader = Loader(corpus, tokenizer="bytes", workers=0, seed=0, rank=rank, world_size=2)
with loader.batches(64, 2) as batches:
    plain = [b.tolist() for b in batches]
with loader.batches(64, 2) as batches:
    same = [b.tolist() for b in same_steps(batches)]
dist.barrier()  # every rank got here: none waits for ever
print(json.dumps([len(plain), len(same), same == plain[: len(same)]]))
dist.destroy_process_group()
"""


def test_same_steps_stops_every_rank_at_the_first_to_run_out(varied: Path) -> None:
    """Two ranks of packed batches differ in number (equal documents, not ids): under
    ``same_steps`` both stop at the shorter's count, each its own batches in order."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-c", SAME_STEPS, str(varied), str(port)]
    ranks = [
        subprocess.Popen([*command, str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for r in range(2)
    ]
    outs = []
    try:
        for process in ranks:
            out, err = process.communicate(timeout=90)
            assert process.returncode == 0, err.decode()
            outs.append(json.loads(out.decode().splitlines()[-1]))
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    (plain0, same0, prefix0), (plain1, same1, prefix1) = outs
    assert plain0 != plain1, "the ranks' batches do not differ in number: the test shows nothing"
    assert same0 == same1 == min(plain0, plain1)
    assert prefix0 and prefix1
