"""Issue 37: FlexAttention's ``BlockMask`` and the varlen layout of packed rows, against SDPA
under the dense document mask (``document_mask``), on the CPU.

FlexAttention runs here without ``torch.compile`` (its eager path, which materialises the
scores and warns so): the same mask semantics as the compiled kernel of a GPU, at CPU speed.
The block mask is built compiled too (``compile=True``: a slow test, inductor on the CPU)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
flex = pytest.importorskip("torch.nn.attention.flex_attention")

from openwebtext import Loader  # noqa: E402
from openwebtext.torch import (  # noqa: E402
    document_block_mask,
    document_cu_seqlens,
    document_mask,
    varlen,
)

EAGER = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
# torch.compile's first use may warn from torch's own modules (torch.utils.mkldnn's
# torch.jit.script_method on torch >= 2.10): those only, never a warning of openwebtext's.
COMPILING = pytest.mark.filterwarnings(
    r"ignore::DeprecationWarning:torch(\.|$)", r"ignore::FutureWarning:torch(\.|$)"
)


def random_rows(rows: int, length: int, seed: int, pad: bool) -> torch.Tensor:
    """Segment ids of packed rows: documents of random lengths numbered from 1, and (``pad``)
    a run of padding (0) at the end of some rows, as best fit leaves."""
    rng = np.random.default_rng(seed)
    out = np.zeros((rows, length), dtype=np.int32)
    for r in range(rows):
        end = length - (int(rng.integers(0, length // 3)) if pad and r % 2 else 0)
        at, segment = 0, 1
        while at < end:
            n = int(rng.integers(1, max(2, length // 4)))
            out[r, at : min(end, at + n)] = segment
            at, segment = at + n, segment + 1
    return torch.from_numpy(out)


def attention_both_ways(segment_ids: torch.Tensor, block_size: int) -> tuple[torch.Tensor, ...]:
    rows, length = segment_ids.shape
    torch.manual_seed(0)
    q, k, v = (torch.randn(rows, 2, length, 16) for _ in range(3))
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=document_mask(segment_ids)
    )
    block_mask = document_block_mask(segment_ids, block_size=block_size)
    return flex.flex_attention(q, k, v, block_mask=block_mask), dense


@EAGER
@pytest.mark.parametrize(("length", "block_size"), [(256, 128), (96, 16), (64, 128)])
@pytest.mark.parametrize("pad", [False, True])
def test_flex_attention_under_the_block_mask_is_sdpa_under_the_dense_mask(
    length: int, block_size: int, pad: bool
) -> None:
    segment_ids = random_rows(3, length, seed=length + block_size, pad=pad)
    got, want = attention_both_ways(segment_ids, block_size)
    assert torch.allclose(got, want, atol=1e-5)


@EAGER
def test_the_block_mask_of_best_fit_batches(small_corpus: Path) -> None:
    loader = Loader(small_corpus, tokenizer="bytes", seed=3, workers=0)
    with loader.batches(1023, 2, packing="bestfit", segments=True, window=20) as batches:
        rows = [row for b in batches for row in b.segment_ids[:, :-1]]
    # Rows with padding after several documents first, then a row of one document.
    rows.sort(key=lambda row: (-int((row == 0).any()), -int(row.max())))
    segment_ids = torch.from_numpy(np.stack(rows[:3] + rows[-1:]))
    assert (segment_ids[0] == 0).any() and segment_ids[0].max() > 1
    got, want = attention_both_ways(segment_ids, 32)
    assert torch.allclose(got, want, atol=1e-5)


def test_the_blocks_no_position_may_attend_are_left_out() -> None:
    # Two rows of 4 documents of 16 ids: with blocks of 16, each query block sees its own
    # document's block only; with one document per row, every block up to the diagonal.
    short = torch.arange(64).div(16, rounding_mode="floor").add(1).repeat(2, 1)
    mask = document_block_mask(short, block_size=16)
    seen = mask.kv_num_blocks + (0 if mask.full_kv_num_blocks is None else mask.full_kv_num_blocks)
    assert seen.tolist() == [[[1, 1, 1, 1]]] * 2
    whole = document_block_mask(torch.ones(2, 64, dtype=torch.int32), block_size=16)
    seen = whole.kv_num_blocks + whole.full_kv_num_blocks
    assert seen.tolist() == [[[1, 2, 3, 4]]] * 2


def test_varlen_gives_the_sequences_and_the_longest() -> None:
    segments = torch.tensor([[1, 1, 2, 2, 2, 0], [1, 2, 3, 3, 0, 0]])
    layout = varlen(segments)
    assert layout.cu_seqlens.dtype == torch.int32
    assert layout.cu_seqlens.tolist() == [0, 2, 5, 6, 7, 8, 10, 12]
    assert layout.cu_seqlens.tolist() == document_cu_seqlens(segments).tolist()
    assert layout.max_seqlen == 3
    # Each sequence attended alone, causally, is what the dense mask gives its positions.
    torch.manual_seed(0)
    q = torch.randn(2, 1, 6, 8)
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, q, q, attn_mask=document_mask(segments)
    )
    flat = q.transpose(1, 2).reshape(12, 1, 8)  # (B*L, H, D), as the varlen kernels take it
    starts = layout.cu_seqlens.tolist()
    for a, b in itertools.pairwise(starts):
        row, at = divmod(a, 6)
        if int(segments[row, at]) == 0:
            continue  # padding: its outputs are not trained on
        seq = flat[a:b].transpose(0, 1)[None]
        alone = torch.nn.functional.scaled_dot_product_attention(seq, seq, seq, is_causal=True)
        assert torch.allclose(alone[0, 0], dense[row, 0, at : at + b - a], atol=1e-6)


@pytest.mark.slow  # (compiles create_block_mask on the CPU: about 20 s)
@COMPILING
def test_the_compiled_block_mask_is_the_eager_one_and_compiles_a_few_times_only() -> None:
    # It was create_block_mask(_compile=True), deprecated (a warning, an error here) since 2.6.
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    graphs = []
    # Row counts and lengths change: a recompile or two, until the sizes are dynamic; then
    # none, however many masks over other segment ids follow.
    sizes = [(2, 256, 128), (2, 256, 128), (3, 256, 128), (3, 384, 128), (2, 512, 128),
             (4, 200, 128), (3, 320, 64)]  # fmt: skip
    for seed, (rows, length, block_size) in enumerate(sizes):
        segment_ids = random_rows(rows, length, seed=seed, pad=True)
        got = document_block_mask(segment_ids, block_size=block_size, compile=True)
        want = document_block_mask(segment_ids, block_size=block_size)
        assert torch.equal(got.to_dense(), want.to_dense())  # (the blocks, partial or full)
        assert torch.equal(got.kv_num_blocks, want.kv_num_blocks)
        assert (got.full_kv_num_blocks is None) == (want.full_kv_num_blocks is None)
        if want.full_kv_num_blocks is not None:
            assert torch.equal(got.full_kv_num_blocks, want.full_kv_num_blocks)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[0] == graphs[1] >= 1  # (the same sizes again: nothing compiled)
    assert graphs[4] == graphs[5] == graphs[3], graphs
    assert graphs[-1] <= graphs[3] + 1, graphs  # (another block size: once more at most)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the compiled kernel")
@COMPILING
def test_on_cuda_compiled_flex_attention_under_the_block_mask_is_sdpa_dense() -> None:
    segment_ids = random_rows(4, 512, seed=5, pad=True).cuda()
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 2, 512, 64, device="cuda") for _ in range(3))
    dense = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=document_mask(segment_ids)
    )
    block_mask = document_block_mask(segment_ids, compile=True)
    got = torch.compile(flex.flex_attention)(q, k, v, block_mask=block_mask)
    assert torch.allclose(got, dense, atol=2e-3)
