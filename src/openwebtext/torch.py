"""PyTorch integration: an ``IterableDataset`` that shards itself and resumes exactly.

Install with ``pip install 'openwebtext[torch]'``.

- Inside ``torch.utils.data.DataLoader(num_workers=N)`` every DataLoader worker
  takes its own share of the units (rank ``rank * N + worker``, world
  ``world_size * N``) and reads in its own process (DataLoader workers are
  daemonic and may not start processes of their own); with ``num_workers=0``
  the dataset reads with ``options.workers`` worker processes.
- ``rank`` and ``world_size`` come from ``torch.distributed`` when it is
  initialised and the options leave them at their defaults.
- ``state_dict()`` / ``load_state_dict()`` follow the protocol of
  ``torchdata.stateful_dataloader.StatefulDataLoader``, which calls them in each
  worker, so a training loop checkpoints and resumes exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("openwebtext.torch needs PyTorch: pip install 'openwebtext[torch]'") from exc

from .corpus import Corpus
from .loader import Document, DocumentIterator
from .options import Options

__all__ = ["OpenWebTextDataset"]


class OpenWebTextDataset(IterableDataset[Document]):
    """Documents of a corpus as a PyTorch ``IterableDataset``.

    Args:
        corpus: A ``Corpus``, or paths, folders or glob patterns.
        options: An ``Options``; keyword arguments override its fields.

    Example::

        dataset = OpenWebTextDataset("data/", seed=0, shuffle_buffer=4096)
        loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2)
        ...
        torch.save({"model": model.state_dict(), "data": loader.state_dict()}, path)
    """

    def __init__(
        self,
        corpus: Corpus | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__()
        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
        base = options or Options()
        self.options = replace(base, **overrides) if overrides else base
        self._state: dict[str, Any] | None = None
        self._iterator: DocumentIterator | None = None

    def shard_options(self) -> Options:
        """The options of this process's share: distributed rank, then DataLoader worker."""
        opts = self.options
        rank, world = opts.rank, opts.world_size
        if world == 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        # Equal counts matter across training ranks; DataLoader workers of one
        # rank are merged again, so by default they need no evening out.
        even = opts.even if opts.even is not None else world > 1
        info = get_worker_info()
        workers = opts.workers
        if info is not None:
            rank, world = rank * info.num_workers + info.id, world * info.num_workers
            workers = 0
        return replace(opts, rank=rank, world_size=world, even=even, workers=workers)

    def __iter__(self) -> Iterator[Document]:
        if self._iterator is not None:
            self._iterator.close()
        iterator = DocumentIterator(self.corpus, self.shard_options(), state=self._state)
        self._iterator, self._state = iterator, None
        return iter(iterator)

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch``'s order next time (as ``DistributedSampler.set_epoch``)."""
        self.options = replace(self.options, epoch=epoch)

    def state_dict(self) -> dict[str, Any]:
        """Where this share of the stream is (or will start, before iteration)."""
        if self._iterator is not None:
            return self._iterator.state_dict()
        return dict(self._state) if self._state is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next iteration right after the document ``state`` was taken at."""
        self._state = state or None
