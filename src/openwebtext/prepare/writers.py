"""Pass 1 of a prepare run: tokenize the units of a run (or a slice) in order in the worker
pool, and append each unit's documents to the files its split rule says: ``train.bin`` or
``val.bin`` by the hash of a document's name (``hash``), or ``tokens.bin`` and
``lengths.bin`` in corpus order (``nanogpt``, for the permutation pass)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from openwebtext.engine import Loaded, Pool, PoolOptions, open_pool
from openwebtext.index import Corpus
from openwebtext.plan import in_validation
from openwebtext.prepare.config import LENGTH, PrepareOptions, Progress
from openwebtext.prepare.record import Run
from openwebtext.prepare.state import Counts, FileName, Split
from openwebtext.tokenizer import Tokenizer

__all__ = ["tokenize_units"]


def _open_pool(corpus: Corpus, options: PrepareOptions, tokenizer: Tokenizer) -> Pool:
    """The pool, with the loader's defaults for everything prepare does not choose."""
    pool_options = PoolOptions(
        workers=options.workers,
        retries=0 if options.on_error == "raise" else 1,
        tokenizer=tokenizer,  # ``options.tokenizer``, resolved once by ``prepare``
        normalise=options.split_rule == "nanogpt",
    )
    return open_pool(corpus.units, pool_options, corpus.storage)


def tokenize_units(
    run: Run,
    corpus: Corpus,
    options: PrepareOptions,
    tokenizer: Tokenizer,
    order: list[int],
    stop: int,
    names: tuple[FileName, ...],
) -> None:
    """Pass 1: tokenize units ``order[position:stop]`` in order, appending to the parts."""
    record = run.record
    position = record.position
    sizes = record.sizes
    parts = {n: run.workdir.part(n, sizes.get(n, 0)) for n in names}
    itemsize = tokenizer.dtype.itemsize
    units = corpus.units
    first = record.config.first
    total = sum(units[u].size for u in order[first:stop])
    done = total - sum(units[u].size for u in order[position:stop])
    take = options.take
    tokens_now = 0
    consistent = True  # the parts hold whole units only: a checkpoint may be taken now
    pool = _open_pool(corpus, options, tokenizer)
    try:
        last = time.monotonic()
        for loaded in pool.run(order[position:stop]):
            consistent = False
            budget = None if take is None else take - _documents(run.counts)
            written = _write_unit(run, loaded, parts, itemsize, options, budget)
            tokens_now += written
            run.tokenized += written
            position += 1
            done += units[loaded.unit].size
            consistent = True
            taken = take is not None and _documents(run.counts) >= take
            if taken or time.monotonic() - last >= run.checkpoint_seconds:
                run.checkpoint(parts, position=stop if taken else position)
                last = time.monotonic()
            run.progress(Progress("tokenize", done, total, tokens_now))
            if taken:
                break
        run.checkpoint(parts, position=stop)
    except BaseException:
        if consistent:  # e.g. Ctrl-C while waiting for the workers: keep every finished unit
            with contextlib.suppress(Exception):  # never hide why the run ended
                run.checkpoint(parts, position=position)
        raise
    finally:
        pool.close()
        for part in parts.values():
            part.close()


def _write_unit(
    run: Run,
    loaded: Loaded,
    parts: dict[FileName, Any],
    itemsize: int,
    options: PrepareOptions,
    budget: int | None,
) -> int:
    """Apply the error policy to a unit's errors, then append its documents (at most
    ``budget``) to the parts, as the split rule says; the tokens written."""
    for error in loaded.errors:
        run.error(error)
    if loaded.counts is None:  # the whole unit failed, and was skipped
        return 0
    if options.split_rule == "hash":
        return _write_hashed(run, loaded, loaded.counts, parts, itemsize, options, budget)
    return _write_in_order(run, loaded, loaded.counts, parts, itemsize, budget)


def _write_hashed(
    run: Run,
    loaded: Loaded,
    id_counts: list[int],
    parts: dict[FileName, Any],
    itemsize: int,
    options: PrepareOptions,
    budget: int | None,
) -> int:
    """Append a unit's documents to train.bin or val.bin by the hash of their names."""
    data = loaded.data
    tokens = 0
    written: dict[Split, list[int]] = {"train": [0, 0], "val": [0, 0]}  # documents, tokens
    fraction, seed = options.val_fraction, options.val_seed
    files = {"train": parts["train.bin"], "val": parts["val.bin"]}
    for name, offset, count in zip(loaded.names, loaded.offsets, id_counts, strict=True):
        if offset < 0:
            continue
        if budget is not None:
            if budget <= 0:
                break
            budget -= 1
        split: Split = "val" if in_validation(name, fraction, seed) else "train"
        files[split].write(data[offset : offset + count * itemsize])
        written[split][0] += 1
        written[split][1] += count
        tokens += count
    for split, (documents, ids) in written.items():
        run.counts = run.counts.add(split, documents, ids)
    return tokens


def _write_in_order(
    run: Run,
    loaded: Loaded,
    id_counts: list[int],
    parts: dict[FileName, Any],
    itemsize: int,
    budget: int | None,
) -> int:
    """Append a unit's ids (its kept documents lie packed in ``data``) and their lengths."""
    lengths = [c for o, c in zip(loaded.offsets, id_counts, strict=True) if o >= 0]
    if budget is not None:
        lengths = lengths[:budget]
    tokens = sum(lengths)
    parts["tokens.bin"].write(loaded.data[: tokens * itemsize])
    parts["lengths.bin"].write(np.array(lengths, dtype=LENGTH).tobytes())
    split = next(iter(run.counts.documents))  # "all" in a slice; else "train"
    run.counts = run.counts.add(split, len(lengths), tokens)
    return tokens


def _documents(counts: Counts) -> int:
    """The documents ``counts`` holds, in every split."""
    return sum(counts.documents.values())
