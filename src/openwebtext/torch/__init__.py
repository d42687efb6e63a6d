"""PyTorch integration: ``IterableDataset``s that shard themselves and resume exactly, a device
stage that puts batches on the accelerator ahead of time, and the attention layouts of packed rows.

Install from the clone with ``pip install -e '.[torch]'``.

- ``OpenWebTextDataset`` yields documents; ``PackedBatchDataset`` yields packed
  token batches (``Loader.batches``), already batched: use ``batch_size=None``.
- Inside ``torch.utils.data.DataLoader(num_workers=N)`` every DataLoader worker
  takes its own share of the documents (rank ``rank * N + worker``, world
  ``world_size * N``) and reads in its own process (DataLoader workers are
  daemonic and may not start processes of their own); with ``num_workers=0``
  the dataset reads with ``options.workers`` worker processes.
- ``rank`` and ``world_size`` come from ``torch.distributed`` when it is
  initialised and the options leave them at their defaults.
- Shares (ranks x DataLoader workers) are intervals of each epoch's documents, cut at
  documents, so they need the documents per unit: the dataset counts them (or reads the
  cached counts) once, in the main process, when it is built or at ``set_epoch``;
  DataLoader workers inherit the counts. Build it after
  ``torch.distributed.init_process_group`` when ``even`` follows the world size.
- ``state_dict()`` / ``load_state_dict()`` follow the protocol of
  ``torchdata.stateful_dataloader.StatefulDataLoader``, which calls them in each
  worker, so a training loop checkpoints and resumes exactly.
- Every ``iter(dataset)`` is a pass of its own, which no other pass ends (with
  ``num_workers=0``, a peek or an eval pass inside a loop leaves the loop's pass going on);
  ``state_dict()`` is the pass started last's. A pass's workers stop when it runs out, fails,
  is closed or is dropped; after an error, its ``next()`` says so (RuntimeError), as
  ``Loader.iter``'s does. ``set_epoch`` reaches persistent DataLoader workers too.
- Another world size or ``num_workers`` (``reshard_loader_states``): gather every rank's
  ``StatefulDataLoader.state_dict()`` (``torch.distributed.all_gather_object``), reshard the
  shares' dataset states for the new ranks x workers, and give each new rank its own with
  ``dataset.load_resharded(...)`` before a fresh ``StatefulDataLoader`` iterates it.
  torchdata itself refuses this: its multi-process state must hold one snapshot per worker,
  numbered ``worker_0..``, and it restores them by number (a state of 2 workers loaded into 4
  starts two of them from scratch; into 1, one worker's position is lost), and its
  single-process and multi-process states have different shapes. So the resharded states go
  to the dataset, not through ``StatefulDataLoader.load_state_dict``::

      state = loader.state_dict()                      # on every old rank, at its own step
      gathered = [None] * world_size
      torch.distributed.all_gather_object(gathered, state)
      ...                                              # restart on W' ranks, N' workers
      shares = reshard_loader_states(gathered, new_world_size, new_num_workers)
      dataset = PackedBatchDataset("data/", 1024, 8, tokenizer="gpt2", seed=0)
      dataset.load_resharded(shares[torch.distributed.get_rank()])
      loader = StatefulDataLoader(dataset, batch_size=None, num_workers=new_num_workers)

- Equal steps on every rank (``same_steps``): ranks hand out the same number of documents,
  but not of ids, so over a finite number of epochs their packed batches differ in number
  (a few per epoch) and the rank with more would wait for ever in its next all-reduce.
  ``for batch in same_steps(loader):`` stops every rank at the step the first one runs out
  of batches, for one all-reduce of one integer per step.

- The device stage (``to_device(batches, "cuda", depth=2)``): ``Loader.batches(...)`` (or a
  ``StatefulDataLoader``) as tensors on the device, made on a thread and copied from pinned
  host buffers on a side CUDA stream ``depth`` batches ahead; the training stream waits on an
  event, never on a ``synchronize``. Its ``state_dict()`` is the state after the last batch
  handed out, not the read-ahead's; ``start()`` fills it while a checkpoint loads.
- Attention layouts of packed rows' ``segment_ids``: ``document_mask`` (SDPA's dense mask),
  ``document_block_mask`` (FlexAttention's ``BlockMask``), ``varlen`` /
  ``document_cu_seqlens`` (FlashAttention's varlen ``cu_seqlens`` and longest sequence).
"""

from __future__ import annotations

from openwebtext.errors import install_hint

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(f"openwebtext.torch needs PyTorch: {install_hint('torch')}") from exc

from openwebtext.torch.datasets import OpenWebTextDataset, PackedBatchDataset, same_steps
from openwebtext.torch.feed import DeviceBatches, to_device
from openwebtext.torch.loaderstates import loader_dataset_states, reshard_loader_states
from openwebtext.torch.masks import (
    Varlen,
    document_block_mask,
    document_cu_seqlens,
    document_mask,
    varlen,
)

__all__ = [
    "DeviceBatches",
    "OpenWebTextDataset",
    "PackedBatchDataset",
    "Varlen",
    "document_block_mask",
    "document_cu_seqlens",
    "document_mask",
    "loader_dataset_states",
    "reshard_loader_states",
    "same_steps",
    "to_device",
    "varlen",
]
