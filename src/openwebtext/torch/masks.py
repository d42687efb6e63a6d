"""Attention layouts of packed rows from their segment ids (``PackedBatch.segment_ids``:
documents numbered from 1 within a row, 0 for padding): SDPA's dense mask, FlexAttention's
``BlockMask``, and FlashAttention's varlen ``cu_seqlens``. All of them let a position attend to
itself and the earlier positions of its own document. A padding position attends to itself only
under the masks (so that no row is all masked), and to its run of padding under varlen (a
sequence of its own); either way its output is not trained on."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from openwebtext.loader import cu_seqlens
from openwebtext.options import as_int, int_at_least

try:  # FlexAttention came with torch 2.5; the rest of this module needs less
    from torch.nn.attention.flex_attention import create_block_mask
except ImportError:  # pragma: no cover - depends on the installed torch
    create_block_mask = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

__all__ = ["Varlen", "document_block_mask", "document_cu_seqlens", "document_mask", "varlen"]


def _rows(segment_ids: torch.Tensor, what: str) -> torch.Tensor:
    """``segment_ids`` checked as rows (B, L) of ints.

    Raises:
        ValueError: another shape or dtype, named (one row (L,): ``segment_ids[None]``).
    """
    shape = tuple(getattr(segment_ids, "shape", ()))
    if not isinstance(segment_ids, torch.Tensor) or segment_ids.ndim != 2:
        hint = " (one row: segment_ids[None])" if len(shape) == 1 else ""
        raise ValueError(f"{what} takes segment ids as rows (B, L), not of shape {shape}{hint}")
    if segment_ids.dtype.is_floating_point or segment_ids.dtype == torch.bool:
        raise ValueError(f"{what} takes segment ids of an integer dtype, not {segment_ids.dtype}")
    return segment_ids


def document_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """The block-diagonal causal mask of ``segment_ids`` (B, L) for
    ``torch.nn.functional.scaled_dot_product_attention(attn_mask=…)``: (B, 1, L, L), True where
    a position may attend, i.e. to itself and the earlier positions of its own document; a
    padding position (segment 0) attends to itself only (so that no row is all masked).

    Raises:
        ValueError: ``segment_ids`` not (B, L) ints.
    """
    length = _rows(segment_ids, "document_mask").shape[-1]
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    eye = torch.eye(length, dtype=torch.bool, device=segment_ids.device)
    mask = torch.where((segment_ids == 0)[:, :, None], eye, same & causal)
    return mask[:, None]


def document_block_mask(
    segment_ids: torch.Tensor, *, block_size: int = 128, compile: bool = False
) -> BlockMask:
    """FlexAttention's ``BlockMask`` of ``segment_ids`` (B, L): the document-causal mask of
    ``document_mask``, for ``flex_attention(q, k, v, block_mask=…)`` with queries and keys of
    length L (on the device of ``segment_ids``, shared by all heads).

    Blocks of ``block_size`` x ``block_size`` that no position of a row may attend are skipped
    by the kernel, so a row of many short documents costs far less than a dense mask.

    Args:
        segment_ids: (B, L) ints, e.g. ``batch["segment_ids"][:, :-1]`` of the inputs.
        block_size: FlexAttention's block (128 by default, as ``create_block_mask``).
        compile: Build the mask with ``torch.compile(create_block_mask)`` (torch >= 2.6;
            not ``create_block_mask(_compile=True)``, deprecated since), compiled at the first
            call and reused: worth it on a GPU for long rows, where the eager build
            materialises (B, L, L).

    Raises:
        ImportError: torch has no FlexAttention (before 2.5).
        ValueError: ``segment_ids`` not (B, L) ints, or empty; ``block_size`` not an int >= 1.
    """
    _rows(segment_ids, "document_block_mask")
    if 0 in segment_ids.shape:  # (FlexAttention's own error, an IndexError or an assert)
        raise ValueError(f"document_block_mask takes at least one row of one position, not "
                         f"segment ids of shape {tuple(segment_ids.shape)}")  # fmt: skip
    block_size = as_int(block_size)
    if not int_at_least(block_size, 1) or block_size > 2**31:
        raise ValueError(f"block_size must be an int >= 1 (FlexAttention's block), not "
                         f"{block_size!r}")  # fmt: skip
    if create_block_mask is None:
        raise ImportError(
            f"document_block_mask needs FlexAttention (torch >= 2.5): {torch.__version__}"
        )
    rows, length = segment_ids.shape

    def document_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
        segment = segment_ids[b, q]
        same = (segment == segment_ids[b, kv]) & (kv <= q)
        return same & ((segment != 0) | (q == kv))

    build = _compiled_create_block_mask() if compile else create_block_mask
    return build(document_causal, rows, None, length, length, device=segment_ids.device,
                 BLOCK_SIZE=block_size)  # fmt: skip


@functools.cache
def _compiled_create_block_mask() -> Any:
    """``torch.compile(create_block_mask)``, wrapped once per process. The compiled graphs
    are reused by every ``document_block_mask(compile=True)`` (a new mask function per call, of
    one code, over other segment ids): new row counts and lengths recompile it at most a few
    times, after which their sizes are dynamic."""
    return torch.compile(create_block_mask)


def document_cu_seqlens(segment_ids: torch.Tensor) -> torch.Tensor:
    """``cu_seqlens`` (int32, on the device of ``segment_ids``) of the rows (B, L) flattened,
    for FlashAttention's varlen kernels: every run of one segment in a row is a sequence.

    Raises:
        ValueError: ``segment_ids`` not (B, L) ints.
    """
    starts = cu_seqlens(_rows(segment_ids, "document_cu_seqlens").detach().cpu().numpy())
    return torch.from_numpy(starts).to(segment_ids.device)


class Varlen(NamedTuple):
    """What FlashAttention's varlen kernels take besides q, k, v (flattened to (B*L, H, D))."""

    cu_seqlens: torch.Tensor
    """int32 (n + 1,): where each of the n sequences starts, then B*L (``cu_seqlens_q`` and
    ``cu_seqlens_k``)."""
    max_seqlen: int
    """The longest sequence (``max_seqlen_q`` and ``max_seqlen_k``)."""


def varlen(segment_ids: torch.Tensor) -> Varlen:
    """``cu_seqlens`` and the longest sequence of the rows (B, L) flattened, for
    ``flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
    causal=True)``: every run of one segment in a row is a sequence (a run of padding too, so
    that the lengths add up to B*L). The lengths are found on the host (one copy of the ids),
    as the kernels want ``max_seqlen`` as a Python int.

    Raises:
        ValueError: ``segment_ids`` not (B, L) ints.
    """
    starts = cu_seqlens(_rows(segment_ids, "varlen").detach().cpu().numpy())
    longest = int((starts[1:] - starts[:-1]).max()) if len(starts) > 1 else 0
    return Varlen(torch.from_numpy(starts).to(segment_ids.device), longest)
