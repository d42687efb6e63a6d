"""PyTorch integration: ``IterableDataset``s that shard themselves and resume exactly.

Install with ``pip install 'openwebtext[torch]'``.

- ``OpenWebTextDataset`` yields documents; ``PackedBatchDataset`` yields packed
  token batches (``Loader.batches``), already batched: use ``batch_size=None``.
- Inside ``torch.utils.data.DataLoader(num_workers=N)`` every DataLoader worker
  takes its own share of the units (rank ``rank * N + worker``, world
  ``world_size * N``) and reads in its own process (DataLoader workers are
  daemonic and may not start processes of their own); with ``num_workers=0``
  the dataset reads with ``options.workers`` worker processes.
- ``rank`` and ``world_size`` come from ``torch.distributed`` when it is
  initialised and the options leave them at their defaults.
- Even sharding (``even``) needs the documents per unit: the dataset counts
  them (or reads the cached counts) once, in the main process, when it is built
  or at ``set_epoch``; DataLoader workers inherit the counts. Build it after
  ``torch.distributed.init_process_group`` when ``even`` follows the world size.
- ``state_dict()`` / ``load_state_dict()`` follow the protocol of
  ``torchdata.stateful_dataloader.StatefulDataLoader``, which calls them in each
  worker, so a training loop checkpoints and resumes exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import DTypeLike

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError("openwebtext.torch needs PyTorch: pip install 'openwebtext[torch]'") from exc

from openwebtext.index import Corpus
from openwebtext.loader import Batches, Document, DocumentIterator, Loader
from openwebtext.options import Options
from openwebtext.stream import ensure_counts

__all__ = ["OpenWebTextDataset", "PackedBatchDataset"]

T = TypeVar("T")
CorpusLike = Corpus | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class _Running(Protocol):
    def state_dict(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class _ShardedDataset(IterableDataset[T]):
    """What both datasets share: the corpus and options, sharding, and the saved state.

    A subclass says how to start its running iterator from options and a state
    (``_start``) and what to yield from it (``_items``).
    """

    def __init__(self, corpus: CorpusLike, options: Options | None, overrides: dict[str, Any]):
        super().__init__()
        self.corpus = corpus if isinstance(corpus, Corpus) else Corpus.open(corpus)
        base = options or Options()
        self.options = replace(base, **overrides) if overrides else base
        self._state: dict[str, Any] | None = None
        self._running: _Running | None = None
        self._count()

    def _rank_options(self) -> Options:
        """The options of this training rank: its distributed rank and world, and ``even``."""
        opts = self.options
        rank, world = opts.rank, opts.world_size
        if world == 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        # Equal counts matter across training ranks; DataLoader workers of one
        # rank are merged again, so by default they need no evening out.
        even = opts.even if opts.even is not None else world > 1
        return replace(opts, rank=rank, world_size=world, even=even)

    def shard_options(self) -> Options:
        """The options of this process's share: distributed rank, then DataLoader worker."""
        opts = self._rank_options()
        info = get_worker_info()
        if info is None:
            return opts
        rank = opts.rank * info.num_workers + info.id
        return replace(opts, rank=rank, world_size=opts.world_size * info.num_workers, workers=0)

    def _count(self) -> None:
        """Count the documents per unit that even sharding needs, here in the main process.

        Called when the dataset is built and by ``set_epoch``, before DataLoader workers
        start: they inherit (fork) or receive (pickle) the counted corpus, instead of each
        counting the whole corpus again. Nothing happens without even sharding, in a
        DataLoader worker, or once counted.
        """
        if get_worker_info() is None:
            self.corpus = ensure_counts(self.corpus, self._rank_options())

    def _start(self, options: Options, state: dict[str, Any] | None) -> Any:
        raise NotImplementedError

    def _items(self, running: Any) -> Iterator[T]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[T]:
        self._stop()
        options = self.shard_options()
        # Counted already, unless ``torch.distributed`` was initialised after the dataset was
        # built (then even sharding was not known to be needed): count once per process.
        self.corpus = ensure_counts(self.corpus, options)
        running = self._start(options, self._state)
        self._running, self._state = running, None
        return self._items(running)

    def _stop(self) -> None:
        if self._running is not None:
            self._running.close()
            self._running = None

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch``'s order next time (as ``DistributedSampler.set_epoch``)."""
        self.options = replace(self.options, epoch=epoch)
        self._count()

    def state_dict(self) -> dict[str, Any]:
        """Where this share of the stream is (or will start, before iteration)."""
        if self._running is not None:
            return self._running.state_dict()
        return dict(self._state) if self._state is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next iteration where ``state`` was taken (the running one, if any, stops)."""
        self._stop()
        self._state = state or None


class OpenWebTextDataset(_ShardedDataset[Document]):
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
        self, corpus: CorpusLike, options: Options | None = None, **overrides: Any
    ) -> None:
        super().__init__(corpus, options, overrides)

    def _start(self, options: Options, state: dict[str, Any] | None) -> DocumentIterator:
        return DocumentIterator(self.corpus, options, state=state)

    def _items(self, running: DocumentIterator) -> Iterator[Document]:
        return iter(running)


class PackedBatchDataset(_ShardedDataset["torch.Tensor"]):
    """Packed token batches of a corpus (``Loader.batches``) as a PyTorch ``IterableDataset``.

    Each item is already a batch: a tensor of ``batch_size`` rows of ``seq_len + 1``
    ids (``x, y = b[:, :-1], b[:, 1:]``), so give the ``DataLoader`` ``batch_size=None``.
    With ``num_workers=N`` each DataLoader worker packs its own share of the
    documents into its own batches, and the ``DataLoader`` hands them out round
    robin: every id of every share is a target once, but a row never mixes
    shares. The ``StatefulDataLoader`` state holds each worker's batches state
    (``Batches.state_dict``) and whose turn is next, so resuming needs the same
    ``num_workers`` (and ranks), as any resume needs the same shards.

    Across training ranks, ``even`` gives every rank the same number of
    documents per epoch, not of batches (documents differ in length): with a
    finite ``epochs`` the ranks' last batches differ by a few. Train for a
    number of steps over ``epochs=None`` (or stop all ranks at the smallest count).

    Args:
        corpus: A ``Corpus``, or paths, folders or glob patterns.
        seq_len: Ids each row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        options: An ``Options`` with ``tokenizer`` set; keyword arguments override its fields.
        dtype: dtype of the batches (int64 suits ``nn.Embedding``).

    Raises:
        ValueError: no tokenizer, or a size is not a positive int.

    Example::

        dataset = PackedBatchDataset("data/", 1024, 8, tokenizer="gpt2", seed=0, epochs=None)
        loader = StatefulDataLoader(dataset, batch_size=None, num_workers=2)
        for batch in loader:
            x, y = batch[:, :-1], batch[:, 1:]
            ...
            torch.save({"model": model.state_dict(), "data": loader.state_dict()}, path)
    """

    def __init__(
        self,
        corpus: CorpusLike,
        seq_len: int,
        batch_size: int,
        options: Options | None = None,
        *,
        dtype: DTypeLike = np.int64,
        **overrides: Any,
    ) -> None:
        super().__init__(corpus, options, overrides)
        # Checked here too, so that a mistake surfaces in the main process, not in a worker.
        if self.options.tokenizer is None:
            raise ValueError("packed batches need token ids: pass tokenizer='gpt2' (or …)")
        for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, not {value!r}")
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.dtype = np.dtype(dtype)

    def _start(self, options: Options, state: dict[str, Any] | None) -> Batches:
        loader = Loader(self.corpus, options)
        return loader.batches(self.seq_len, self.batch_size, dtype=self.dtype, state=state)

    def _items(self, running: Batches) -> Iterator[torch.Tensor]:
        for batch in running:
            yield torch.from_numpy(batch)  # no copy: every batch is a fresh array
