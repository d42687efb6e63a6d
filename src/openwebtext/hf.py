"""Hugging Face ``datasets`` integration: a corpus's documents as a sharded ``IterableDataset``.

Install from the clone with ``pip install -e '.[hf]'``; this module imports without ``datasets``,
and ``iterable_dataset`` raises an ``ImportError`` that says so.

A shard is one share of every epoch's documents: shard ``s`` of ``num_shards`` of rank ``r``
of ``W`` is share ``r * num_shards + s`` of ``W * num_shards`` (the loader's own sharding, one
level down: a rank's shards cut its interval of the epoch into ``num_shards`` intervals, at
documents), in that share's own seeded order, every epoch of the options. The shards are
disjoint and together they are this rank's documents, exactly once (``even`` aside).
``datasets`` calls the generator once per shard and hands DataLoader worker ``i`` of
``N`` the shards ``i, i + N, …``; ``datasets.distributed.split_dataset_by_node`` hands
node ``r`` of ``W`` the shards ``r, r + W, …`` when ``W`` divides ``num_shards``: disjoint
nodes that cover the epoch, though not the intervals of ``Loader(rank=r, world_size=W)``.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

from openwebtext.errors import carry, install_hint
from openwebtext.index import Corpus
from openwebtext.loader import DocumentIterator, Loader, Mixture
from openwebtext.options import Options, as_int, int_at_least

if TYPE_CHECKING:
    import datasets

__all__ = ["iterable_dataset", "shard_options"]

#: How to get what this module needs.

CorpusLike = Corpus | Mixture | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def _require_datasets() -> ModuleType:
    """The ``datasets`` package, or an ``ImportError`` that says how to install it."""
    try:
        return importlib.import_module("datasets")
    except ImportError as exc:
        needs = f"openwebtext.hf needs Hugging Face datasets: {install_hint('hf')}"
        raise ImportError(needs) from exc


def shard_options(options: Options, shard: int, num_shards: int) -> Options:
    """The options that read shard ``shard`` of ``num_shards`` of ``options``' rank.

    Rank ``r`` of ``W`` holds an interval of each epoch's documents; its shard ``s`` of ``n``
    the ``s``-th of ``n`` intervals cut from it: share ``r * n + s`` of ``W * n``. ``even``
    is decided by the training ranks (``options.even_mode``), as a ``Loader`` of
    ``options`` decides it, and then holds across all ``W * n`` shares: every shard yields
    the same count. ``take`` is the shards' together (``Options.take_share``).
    With one shard these are ``options`` themselves (``even`` resolved).

    Raises:
        ValueError: ``num_shards`` is not an int >= 1, or ``shard`` not one in
            ``0..num_shards - 1`` (numpy's integers are ints; a bool or a float is not).
    """
    if not isinstance(options, Options):
        raise TypeError(f"options must be an Options, not {type(options).__name__}")
    shard, num_shards = as_int(shard), as_int(num_shards)
    if not int_at_least(num_shards, 1):
        raise ValueError(f"num_shards must be an int >= 1, not {num_shards!r}")
    if not (int_at_least(shard, 0) and shard < num_shards):
        raise ValueError(f"shard must be an int in 0..{num_shards - 1}, not {shard!r}")
    world = options.world_size
    return replace(
        options,
        rank=options.rank * num_shards + shard,
        world_size=world * num_shards,
        even=options.even_mode,
        take=options.take_share(shard, num_shards),  # (one take of the shards together)
    )


def _shard_documents(
    shards: list[int], loader: Loader, num_shards: int
) -> Iterator[dict[str, Any]]:
    """The generator ``datasets`` calls: the documents of ``shards``, one shard after another.

    In a daemonic process (a DataLoader worker, which may not start processes) every
    shard is read in the process itself (``workers=0``).
    """
    in_daemon = multiprocessing.current_process().daemon
    try:
        for shard in shards:
            options = shard_options(loader.options, shard, num_shards)
            if in_daemon:
                options = replace(options, workers=0)
            with Loader(loader.corpus, options).iter() as documents:
                for document in documents:
                    row = document._asdict()
                    if row.get("source") is None:  # (a corpus's: no part; None fails a collate)
                        del row["source"]
                    yield row
    except BaseException as exc:  # (a DataLoader worker's: torch rebuilds it from its text)
        if in_daemon:
            carry(exc)
        raise


def iterable_dataset(
    paths: CorpusLike,
    options: Options | None = None,
    *,
    num_shards: int = 1,
    **overrides: Any,
) -> datasets.IterableDataset:
    """The documents of a corpus as a ``datasets.IterableDataset`` of ``num_shards`` shards.

    Iterated alone, the dataset yields its shards one after another, each in its own
    seeded order: with ``num_shards=1`` (the default) that is the ``Loader``'s order,
    document for document (``list(Loader(paths, **options))``). Give it one shard per
    reader, ``num_shards = num_workers`` of the ``torch.utils.data.DataLoader`` (times the
    nodes, for ``split_dataset_by_node``): DataLoader worker ``i`` then reads exactly the
    documents, in the order, of ``Loader(paths, rank=i, world_size=num_workers)`` (of
    ``rank=r * num_workers + i, world_size=W * num_workers`` under rank ``r`` of ``W``) with
    ``even`` as the training ranks decide it (``shard_options``: with one training rank,
    None, where such a ``Loader`` would even its shares), reading in its own process, and the
    DataLoader interleaves the workers. The union of all workers is every document of each
    epoch exactly once (``even`` aside, which across training ranks may drop or repeat to
    keep shards equal). Fewer shards than workers leaves workers idle
    (``datasets`` warns); a worker given several shards reads them one after another,
    so with ``epochs=None`` (endless) only its first would ever be read: keep one shard
    per reader. Split across ranks either with our ``rank=``/``world_size=`` options or
    with ``split_dataset_by_node`` (``num_shards`` a multiple of the world size), not both.

    Columns, as the fields of ``Document``: ``text``, ``subset``, ``member``, ``name``,
    ``member_index``, ``document_index``, and a mixture's ``source`` (the part's name; a
    corpus's has none: a column of None fails torch's collate); with ``tokenizer=``, those of
    ``TokenDocument``:
    ``tokens`` instead of ``text``, the numpy array of ids the loader yields (the
    tokenizer's dtype, ``uint16`` for GPT-2; int64 arrays or tensors under
    ``with_format("numpy")`` / ``("torch")``). ``features`` is left undeclared (None):
    declared features make ``datasets`` encode and decode every example (~70 µs per text
    document) and turn ``tokens`` into a list that its numpy and torch formatters then
    convert id by id (~13 and ~45 ms per 1,000 ids, against ~0.2 and ~0.3 ms undeclared).

    Resume: ``datasets``' own ``state_dict()`` / ``load_state_dict()`` (and
    ``StatefulDataLoader``'s, which holds them per worker) record the shard and the count
    of examples given out in it; resuming calls the shard's generator again and drops that
    many examples, so the documents that follow are exactly right, but everything before
    them in the shard is read and decompressed again. ``Loader.iter(state=…)`` and the
    datasets of ``openwebtext.torch`` under ``StatefulDataLoader`` resume exactly without
    reading again what came before. ``IterableDataset.shuffle`` and ``set_epoch`` (called
    by the Trainer) are ``datasets``': ``shuffle`` reorders the shards and mixes their
    documents through a buffer (``buffer_size``, 1000 by default; ``buffer_size=1`` reorders
    the shards only), reseeded by ``set_epoch``, which does nothing without it. Unshuffled, the
    documents' order within a shard is ours, set by ``seed=`` and ``epoch=`` (run several
    epochs with ``epochs=``).

    Args:
        paths: A ``Corpus``, or paths, folders or glob patterns.
        options: An ``Options``; keyword arguments override its fields.
        num_shards: Shards of this rank's units (>= 1).

    Raises:
        ImportError: ``datasets`` is not installed (from the clone: ``pip install -e '.[hf]'``).
        ValueError: ``num_shards`` is not an int >= 1, or an option is invalid.

    Example::

        ds = iterable_dataset("data/", num_shards=4, seed=0).with_format("torch")
        for batch in torch.utils.data.DataLoader(ds, batch_size=8, num_workers=4):
            ...
    """
    hf = _require_datasets()
    num_shards = as_int(num_shards)
    if not int_at_least(num_shards, 1):
        raise ValueError(f"num_shards must be an int >= 1, not {num_shards!r}")
    loader = Loader(paths, options, **overrides)
    # Opened once here, not in every worker: a bad tokenizer fails now, and even sharding's
    # counts are counted (or read) once, for the workers to inherit.
    if isinstance(loader.corpus, Corpus):
        with DocumentIterator(loader.corpus, shard_options(loader.options, 0, num_shards)) as first:
            loader = Loader(first.corpus, loader.options)
    kwargs = {"shards": list(range(num_shards)), "loader": loader, "num_shards": num_shards}
    dataset: datasets.IterableDataset = hf.IterableDataset.from_generator(
        _shard_documents, gen_kwargs=kwargs
    )
    return dataset
