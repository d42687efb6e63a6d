"""The datasets: ``OpenWebTextDataset`` and ``PackedBatchDataset`` (rank and DataLoader-worker
sharding, ``StatefulDataLoader`` states, a rank's resharded ones), and ``same_steps``
(``loaderstates``: a DataLoader's states read and resharded)."""

from __future__ import annotations

import copy
import multiprocessing.context
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, NoReturn, Protocol, TypeVar, cast

import numpy as np
import torch  # the package's ``__init__`` says what to install when it is missing
from numpy.typing import DTypeLike
from torch.utils.data import IterableDataset, get_worker_info

from openwebtext.errors import StateError, carry
from openwebtext.index import Corpus
from openwebtext.loader import (
    BatchIterator,
    Document,
    DocumentIterator,
    Loader,
    Mixture,
    MixtureIterator,
    PackedBatch,
)
from openwebtext.options import Options, as_int, options_with
from openwebtext.stream import (
    DocumentState,
    Packing,
    Schedule,
    batch_ids,
    ensure_counts,
    kind_of,
    packing_window,
    schedule_of,
)
from openwebtext.tokenizer import load_tokenizer
from openwebtext.torch.shared import SharedEpoch, SharedFlags

__all__ = ["OpenWebTextDataset", "PackedBatchDataset", "same_steps"]

# torchdata 0.11's StatefulDataLoader.__init__ calls torch.set_vital, which newer torch says
# is deprecated: a line in each process that builds a loader (each rank), nothing to act on.
warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning, r"torchdata\.")

T = TypeVar("T")
CorpusLike = Corpus | Mixture | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


class _Running(Protocol):
    def __iter__(self) -> Iterator[Any]: ...
    def __next__(self) -> Any: ...
    def state_dict(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class _Pass(Iterator[T]):
    """One pass over a dataset (what ``iter(dataset)`` returns), with its own running iterator
    and workers, whatever other passes of the dataset do: with ``num_workers=0`` every
    DataLoader iterator is a pass of the one dataset, and a second one (a peek, an eval pass)
    leaves the first going on, as a plain ``IterableDataset``'s generators do. Its workers
    stop when it runs out, fails, is closed or is collected. After an error inside ``next()``
    (a corrupt member) ``next()`` raises the running iterator's RuntimeError, as
    ``Loader.iter``'s and ``Loader.batches``' do: never a silent end of the epoch."""

    def __init__(self, running: _Running, item: Callable[[Any], T] | None = None) -> None:
        self._running = running
        self._item = item
        self._next: Iterator[Any] = iter(running)  # (documents: the generator itself)

    def __iter__(self) -> _Pass[T]:
        return self

    def __next__(self) -> T:
        try:
            got = next(self._next)
        except BaseException as exc:  # it ended: from now on the running iterator says how
            self._next = self._running  # (RuntimeError after a failure, else StopIteration)
            self.close()
            if get_worker_info() is not None:  # (a DataLoader worker: torch rebuilds it)
                carry(exc)
            raise
        return got if self._item is None else self._item(got)

    def close(self) -> None:
        """Stop this pass's workers now: it ends here. Safe to call twice."""
        self._running.close()

    def __reduce__(self) -> NoReturn:
        raise TypeError("a pass over a dataset does not pickle or copy (it owns its workers): "
                        "copy the dataset, and take its state_dict()")  # fmt: skip

    def __del__(self) -> None:
        if hasattr(self, "_running"):  # (its __init__ ran)
            self.close()


class _ShardedDataset(IterableDataset[T]):
    """What both datasets share: the corpus and options, sharding, and the saved state.

    A subclass says how to start its running iterator from options and a state
    (``_start``) and what to yield from it (``_pass``). Every ``iter()`` is a pass of its own
    (``_Pass``); ``state_dict()`` is the most recently started pass's (with ``num_workers=0``
    what ``StatefulDataLoader.state_dict()`` asks for: its latest iterator's).
    """

    def __init__(self, corpus: CorpusLike, options: Options | None, overrides: dict[str, Any]):
        super().__init__()
        self.options = options_with(options, overrides)
        opened = corpus if isinstance(corpus, Corpus | Mixture) else Corpus.open(
            corpus, on_error=self.options.on_error
        )  # (a file left out under skip, as ``Loader`` opens it)
        self.corpus: Corpus | Mixture = opened
        self._state: dict[str, Any] | None = None
        self._shares: list[dict[str, Any]] | None = None  # resharded, one per DataLoader worker
        self._taken: SharedFlags | None = None  # which workers started from their share
        self._epoch = SharedEpoch(self.options.epoch)  # (what persistent workers read)
        self._running: _Running | None = None  # the latest pass's (its state_dict())
        self._count()

    def __getstate__(self) -> dict[str, Any]:
        """The dataset without the pass running here (its workers and pipes are this
        process's): a copy (a spawned DataLoader worker's) starts its passes as this one's
        next pass starts."""
        state = dict(self.__dict__)
        state["_running"] = None
        if multiprocessing.context.get_spawning_popen() is None:  # (a copy: values of its own;
            state["_epoch"] = copy.deepcopy(self._epoch)  # a spawned worker's: the same memory,
            state["_taken"] = copy.deepcopy(self._taken)  # which a deep copy would not keep)
        return state

    def _rank_options(self) -> Options:
        """The options of this training rank: its distributed rank and world, and ``even``."""
        opts = self.options
        rank, world = opts.rank, opts.world_size
        if world == 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        # Even across training ranks; one rank's DataLoader workers are merged again.
        even = opts.even if world > 1 else None
        epoch = self._epoch.value  # (set_epoch's, in this worker too)
        return replace(opts, rank=rank, world_size=world, even=even, epoch=epoch)

    def shard_options(self) -> Options:
        """The options of this process's share: distributed rank, then DataLoader worker
        (``take`` is the workers' together, ``Options.take_share``)."""
        opts = self._rank_options()
        info = get_worker_info()
        if info is None:
            return opts
        rank = opts.rank * info.num_workers + info.id
        take = opts.take_share(info.id, info.num_workers)  # (one take of the workers together)
        return replace(opts, rank=rank, world_size=opts.world_size * info.num_workers, workers=0,
                       take=take)  # fmt: skip

    def _count(self) -> None:
        """Count the documents per unit that even sharding needs, here in the main process.

        Called when the dataset is built and by ``set_epoch``, before DataLoader workers
        start: they inherit (fork) or receive (pickle) the counted corpus, instead of each
        counting the whole corpus again. DataLoader workers are shares of the stream, cut at
        documents, so the counts are needed whenever ``num_workers > 1``, which is not known
        here: the corpus is counted once (and cached beside it, as ``owt index`` does)
        whatever the options. Nothing happens in a DataLoader worker, or once counted.
        """
        if get_worker_info() is None:  # workers are shares too: cut at documents, counted
            self.corpus = _counted(self.corpus, self._rank_options(), always=True)

    def _start(self, options: Options, state: dict[str, Any] | None) -> Any:
        raise NotImplementedError

    def _pass(self, running: Any) -> _Pass[T]:
        raise NotImplementedError

    def __iter__(self) -> Iterator[T]:
        # (a pass running goes on: its own workers, ended by itself, never by this one)
        try:  # (an error here too reaches the main process as the library's: ``carry``)
            running = self._begin()
        except BaseException as exc:
            if get_worker_info() is not None:
                carry(exc)
            raise
        self._started()
        self._running = running
        return self._pass(running)

    def _begin(self) -> Any:
        """The running iterator of this process's next pass."""
        options = self.shard_options()
        # Counted already, unless ``torch.distributed`` was initialised after the dataset was
        # built (then even sharding was not known to be needed): count once per process.
        self.corpus = _counted(self.corpus, options)
        try:
            return self._start(options, self._next_start())
        except StateError as exc:
            if not {"rank", "world_size"} & set(exc.resume_with):
                raise
            raise exc.retold(  # (each DataLoader worker is a share: rank * N + worker)
                f"{exc.reason()}: a state of a DataLoader of another num_workers or world "
                "size, whose workers read other shares: load it with the same num_workers and "
                "world size, or reshard it (reshard_loader_states, then load_resharded)"
            ) from None

    def _next_start(self) -> dict[str, Any] | None:
        """The state the next pass of this process starts from (None: the epoch's start):
        this worker's resharded share, in the first pass only, else the state loaded."""
        if self._shares is not None:  # resharded
            assert self._taken is not None
            info = get_worker_info()
            k = 0 if info is None else info.id
            if k < len(self._taken) and not self._taken[k]:
                return self._shares[k]
        return self._state

    def _started(self) -> None:
        """A pass started from ``_next_start()`` (or a state loaded in its place): neither
        starts another.

        DataLoader workers get copies of this dataset for every pass, so forgetting the shares
        in a worker does not reach the next pass's workers: the flags are shared memory,
        which forked (or spawned) workers of every pass see, one per worker.
        """
        self._state = None
        if self._shares is None:
            return
        assert self._taken is not None
        info = get_worker_info()
        k = 0 if info is None else info.id
        if k < len(self._taken):
            self._taken[k] = 1
        if info is None:
            self._shares = None

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch``'s order next time (as ``DistributedSampler.set_epoch``), in
        persistent DataLoader workers too."""
        self.options = replace(self.options, epoch=epoch)
        self._epoch.value = self.options.epoch
        self._count()

    def state_dict(self) -> dict[str, Any]:
        """Where this share of the stream is: in the pass started last (another pass still
        running has its own), or where the next one will start (before iteration, or after a
        load: the state loaded, or this worker's resharded share; ``{}``, the epoch's
        start)."""
        if self._running is not None:
            return self._running.state_dict()
        start = self._next_start()
        return dict(start) if start is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start the next iteration where ``state`` was taken (a pass already running goes on,
        until it ends or is dropped).

        Raises:
            StateError: ``state`` is not a state (the first bad field named), here where it is
                loaded; whether it is this dataset's (corpus, options, this worker's share) is
                checked where the next pass starts, as ``Loader.iter(state=…)`` checks it.
        """
        fresh = state is None or (isinstance(state, Mapping) and not state)  # (as state_dict())
        if not fresh:
            (kind_of(state) or DocumentState).from_json(state)
        self._running = None  # (state_dict() is where the next pass starts)
        self._started()  # (a resharded share not begun: this state goes on in its place)
        self._state = None if fresh else state

    def load_resharded(self, states: Sequence[dict[str, Any]]) -> None:
        """Start the next iteration from this rank's resharded states, one per DataLoader
        worker (one for ``num_workers=0``): an item of ``reshard_loader_states``.

        Raises:
            StateError: no states, or one not a state (``None``, ``{}``: named ``[k]``).
        """
        if not states:  # (none, or a None: the next pass would start the epoch again)
            raise StateError("no resharded states: give this rank's item of "
                             "reshard_loader_states (one state per DataLoader worker)")  # fmt: skip
        for k, share in enumerate(states):  # (each decoded, as load_state_dict's)
            try:
                (kind_of(share) or DocumentState).from_json(share)
            except StateError as exc:
                raise exc.within(f"[{k}]", f"resharded state {k}: ") from None
        self._running, self._state = None, None  # (a pass or state before: the shares go on)
        self._shares = list(states)
        self._taken = SharedFlags([0] * len(self._shares))
        # The rest of the resharded epoch is cut with the counts: counted here, once.
        self.corpus = _counted(self.corpus, self._rank_options(), always=True)


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

    def _start(
        self, options: Options, state: dict[str, Any] | None
    ) -> DocumentIterator | MixtureIterator:
        return Loader(self.corpus, options).iter(state=state)

    def _pass(self, running: DocumentIterator | MixtureIterator) -> _Pass[Document]:
        return _Pass(running)


class PackedBatchDataset(_ShardedDataset["torch.Tensor"]):
    """Packed token batches of a corpus (``Loader.batches``) as a PyTorch ``IterableDataset``.

    Each item is already a batch: a tensor of ``batch_size`` rows of ``seq_len + 1``
    ids (``x, y = b[:, :-1], b[:, 1:]``), so give the ``DataLoader`` ``batch_size=None``.
    With ``num_workers=N`` each DataLoader worker packs its own share of the
    documents into its own batches, and the ``DataLoader`` hands them out round
    robin: every id of every share is a target once, but a row never mixes
    shares. The ``StatefulDataLoader`` state holds each worker's batches state
    (``Batches.state_dict``) and whose turn is next, so ``load_state_dict`` needs the
    same ``num_workers`` (and ranks), as any resume needs the same shards; for another
    world size or ``num_workers``, reshard (``reshard_loader_states``, ``load_resharded``).

    Across training ranks, ``even`` gives every rank the same number of
    documents per epoch, not of batches (documents differ in length): with a
    finite ``epochs`` the ranks' last batches differ by a few. Train for a
    number of steps over ``epochs=None`` (or stop all ranks at the smallest count).

    Args:
        corpus: A ``Corpus``, or paths, folders or glob patterns.
        seq_len: Ids each row predicts (a row holds ``seq_len + 1``).
        batch_size: Rows per batch.
        schedule: Shapes that change during training, instead of ``seq_len`` and
            ``batch_size`` (``Loader.batches(schedule=…)``), in each worker's batches: with
            ``N > 1`` DataLoader workers, a worker's batch ``b`` is about the DataLoader's
            ``b × N`` (docs/packing.md).
        options: An ``Options`` with ``tokenizer`` set; keyword arguments override its fields.
        dtype: dtype of the batches (int64 suits ``nn.Embedding``).
        segments: Yield dicts of ``tokens``, ``segment_ids`` and ``positions`` tensors
            (``Loader.batches(segments=True)``); ``document_mask(segment_ids[:, :-1])`` is the
            attention mask of the inputs.
        packing: ``concat`` or ``bestfit`` (``Loader.batches``).
        window: Documents best fit packs at a time (None: ``Loader.batches``' default; best
            fit's only).
        pad_id: Best fit's padding id (None: the end-of-text id).

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
        seq_len: int | None = None,
        batch_size: int | None = None,
        options: Options | None = None,
        *,
        schedule: Schedule | Sequence[tuple[int, int, int]] | None = None,
        dtype: DTypeLike = np.int64,
        segments: bool = False,
        packing: Packing = "concat",
        window: int | None = None,
        pad_id: int | None = None,
        **overrides: Any,
    ) -> None:
        # Checked here too, so that a mistake surfaces in the main process, not in a worker;
        # the arguments before the corpus is opened (and counted).
        shapes, window = schedule_of(seq_len, batch_size, schedule), as_int(window)
        window, pad_id = packing_window(packing, window), as_int(pad_id)  # (numpy's ints too)
        super().__init__(corpus, options, overrides)
        if self.options.tokenizer is None:
            raise ValueError("packed batches need token ids: pass tokenizer='gpt2' (or …)")
        self.schedule = shapes
        vocabulary = load_tokenizer(self.options.tokenizer)
        self.dtype = batch_ids(dtype, vocabulary, segments, pad_id, packing)
        self.segments, self.packing, self.window, self.pad_id = segments, packing, window, pad_id

    def _start(self, options: Options, state: dict[str, Any] | None) -> BatchIterator[Any]:
        return Loader(self.corpus, options).batches(
            schedule=self.schedule,
            dtype=self.dtype,
            state=state,
            segments=self.segments,
            packing=self.packing,
            window=self.window,
            pad_id=self.pad_id,
        )

    def _pass(self, running: BatchIterator[Any]) -> _Pass[Any]:
        return _Pass(running, _tensors)


def _tensors(batch: Any) -> Any:
    """A batch as tensors (no copy: every batch is a fresh array)."""
    if isinstance(batch, PackedBatch):
        return {name: torch.from_numpy(a) for name, a in batch._asdict().items() if a is not None}
    return torch.from_numpy(batch)


def same_steps(batches: Iterable[T], group: Any = None, device: Any = None) -> Iterator[T]:
    """``batches``, stopped on every rank of ``group`` at the step the first rank runs out.

    Ranks hand out equal numbers of documents, not of ids: over a finite number of epochs one
    rank packs a few more batches than another, and a rank with a batch left would wait for
    ever in an all-reduce the others never join. Before each step the ranks agree, with one
    all-reduce (MIN) of one integer, that every one of them has a batch; the batches a rank
    has beyond the first rank's last are not handed out. Without ``torch.distributed``
    initialised (one process), ``batches`` as they are.

    Args:
        batches: Each rank's batches (a ``DataLoader``, ``Loader.batches``, ...).
        group: The process group (None: the default one).
        device: Where the flag lives: the backend's device (None: CUDA for NCCL, else CPU).
    """
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed:
        yield from batches
        return
    if device is None:
        nccl = torch.distributed.get_backend(group) == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if nccl else "cpu"
    running, end = iter(batches), object()
    while True:
        batch = next(running, end)
        flag = torch.tensor([batch is not end], dtype=torch.int32, device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN, group=group)
        if not flag.item():
            return
        yield cast(T, batch)


def _counted(corpus: Corpus | Mixture, options: Options, *, always: bool = False) -> Any:
    """``corpus`` with the counts ``options`` need (a mixture's: each part's)."""
    if isinstance(corpus, Mixture):
        return corpus.with_counts(options, always=always)
    return ensure_counts(corpus, options, always=always)
