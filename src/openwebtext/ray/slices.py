"""``owt tokenize --engine ray``: the slices of one prepare run as Ray tasks, then the merge.

The work is cut by what ``openwebtext.prepare`` exports only: ``slice_sizes`` and
``slice_folders`` (bounds from ``plan.shard_range``), ``prepare(..., shard=(i, n))`` for one
slice in a task, ``merge`` (which bounds the whole run's skips by ``max_errors``),
``finished_report`` for a run already done, and ``remove_folder`` for the merged slices.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from openwebtext.index import Corpus
from openwebtext.plan import shard_count
from openwebtext.prepare import (
    Location,
    PrepareOptions,
    Progress,
    Report,
    finished_report,
    lock_output,
    merge,
    prepare,
    remove_folder,
    slice_folders,
    slice_sizes,
)
from openwebtext.ray.cluster import EngineError, configure_storage, local_ray, ray_module, unwrap

__all__ = ["SLICES", "tokenize"]

#: The folder under ``OUT`` that holds the slices of a Ray run.
SLICES = ".owt-ray"

_log = logging.getLogger("openwebtext")
#: How many times a slice's task runs again after its worker died.
_RETRIES = 3


def _slice_task(
    corpus: Corpus,
    folder: str,
    options: PrepareOptions,
    index: int,
    count: int,
    every: float,
    storage_options: dict[str, Any] | None,
    restart: bool,
    wait: bool,
) -> tuple[int, list[str]]:
    """One Ray task: prepare slice ``index`` of ``count``; the tokens it tokenized (0: the
    slice was already done; an earlier run's part of a resumed slice is not counted) and its
    skip messages. ``restart``: also throw away the progress this
    node may have staged for the slice's URL (the slices themselves are already gone)."""
    configure_storage(storage_options)
    report = prepare(
        corpus,
        folder,
        dataclasses.replace(options, workers=0),
        shard=(index, count),
        restart=restart,
        checkpoint_seconds=every,
        wait=wait,
    )
    return report.tokenized, list(report.skipped)


def tokenize(
    corpus: Corpus,
    out: str | os.PathLike[str],
    options: PrepareOptions | None = None,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    units_per_task: int = 16,
    restart: bool = False,
    progress: Callable[[Progress], None] | None = None,
    checkpoint_seconds: float = 2.0,
    storage_options: dict[str, Any] | None = None,
    verify: bool = True,
    wait: bool = False,
) -> Report:
    """Write what ``prepare.prepare(corpus, out, options)`` writes, with Ray tasks.

    Args:
        corpus: The corpus (its files must be readable by every Ray node).
        out: The output folder (on a file system every node shares), or a URL
            (``s3://bucket/prefix/``, any fsspec URL, made with ``storage_options``).
        options: What to write (``take`` is for the local engine only).
        address: A Ray cluster (None: start a local instance of ``num_cpus`` CPUs).
        num_cpus: CPUs of the local instance (None: Ray's default, every core).
        units_per_task: Units per task. The slice count follows from it, and a rerun must
            use the same value to keep the slices already done.
        restart: Throw away every slice and the merge's progress, and start over.
        progress: Called with a ``Progress`` as tasks finish and as the merge copies.
        checkpoint_seconds: Seconds between two checkpoints within a task.
        storage_options: The options ``corpus`` was opened with (URLs): the tasks use them,
            for the corpus and for an ``out`` URL. (This process uses the corpus's own,
            ``Corpus.storage``, or ``source.configure``'s when it was opened without.)
        verify: Check each slice's files against their sha256 before the merge reads them
            (``prepare.merge``: one more read of every slice; False skips it).
        wait: If another run is writing into ``out`` or one of its slices, wait for it
            rather than fail at once.

    Raises:
        EngineError: Ray is missing or cannot start.
        PrepareError: ``out`` holds another run's progress (rerun with ``restart``).
        CorpusError: a bad member or document under ``on_error="raise"``.
        TooManyErrors: more skips in all than ``max_errors``.
    """
    options = options or PrepareOptions()
    if options.take is not None:
        raise ValueError("take is for the local engine: the Ray engine prepares whole slices")
    shard_count(len(corpus.units), units_per_task)  # a bad value fails before anything is made
    with lock_output(out, wait):  # the whole run: another run into ``out`` is refused at once
        return _tokenize(corpus, out, options, units_per_task, address, num_cpus, restart,
                         progress, checkpoint_seconds, storage_options, verify, wait)  # fmt: skip


def _tokenize(
    corpus: Corpus,
    out: str | os.PathLike[str],
    options: PrepareOptions,
    units_per_task: int,
    address: str | None,
    num_cpus: int | None,
    restart: bool,
    progress: Callable[[Progress], None] | None,
    checkpoint_seconds: float,
    storage_options: dict[str, Any] | None,
    verify: bool,
    wait: bool,
) -> Report:
    """``tokenize``, holding the lock of ``out``."""
    count = shard_count(len(corpus.units), units_per_task)
    folders = slice_folders(out, SLICES, count)
    store = corpus.storage
    if restart:
        remove_folder(out, SLICES, store)
    else:
        already = finished_report(corpus, out, options)
        if already is not None:
            return already
    work = (options, checkpoint_seconds, storage_options, restart, wait)
    with local_ray(address, num_cpus):
        skipped, tokens = _run_slices(
            corpus, folders, slice_sizes(corpus, options, count), work, progress
        )
    merged = merge(
        folders,
        out,
        restart=restart,
        progress=progress,
        storage=store,
        max_errors=options.max_errors,
        verify=verify,
        wait=wait,
    )
    remove_folder(out, SLICES, store)
    return dataclasses.replace(merged, skipped=tuple(skipped), tokenized=tokens)


def _run_slices(
    corpus: Corpus,
    folders: list[Location],
    sizes: list[int],
    work: tuple[PrepareOptions, float, dict[str, Any] | None, bool, bool],
    progress: Callable[[Progress], None] | None,
) -> tuple[list[str], int]:
    """Run every slice as a Ray task (``work``: options, checkpoint seconds, storage options,
    restart, wait); the messages of what they skipped, and the tokens they tokenized."""
    options, checkpoint_seconds, storage_options, restart, wait = work
    count, total = len(folders), sum(sizes)
    skipped: list[str] = []
    ray = ray_module()
    # A task whose worker died (killed, out of memory) runs again: its slice goes on from its
    # checkpoint. An error a task raises is never retried (``retry_exceptions``: off).
    task = ray.remote(num_cpus=1, max_retries=_RETRIES)(_slice_task)
    shared = ray.put(corpus)
    storage = ray.put(storage_options)
    pending = {
        task.remote(
            shared, str(folder), options, i, count, checkpoint_seconds, storage, restart, wait
        ): i
        for i, folder in enumerate(folders)
    }
    done, tokens, began = 0, 0, time.monotonic()
    report = progress or (lambda event: None)
    report(Progress("tokenize", 0, total, 0))
    # On an error or Ctrl-C the other tasks are not cancelled one by one: ``ray.shutdown``
    # (leaving ``local_ray``) ends them with their owner, this driver, and each keeps its
    # last checkpoint. (Cancelling while the workers take the same Ctrl-C hit a failed
    # internal check in Ray 2.60 that aborted the driver before it could clean up.)
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        for ref in ready:
            i = pending.pop(ref)
            try:
                slice_tokens, messages = ray.get(ref)
            except Exception as exc:
                found = unwrap(exc)
                if found is exc:  # (Ray's own: a worker that died again and again, …)
                    raise EngineError(
                        f"a Ray task of slice {i} failed: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''} (run the command again: "
                        "each slice goes on from its checkpoint)"
                    ) from exc
                raise found from None
            tokens += slice_tokens
            skipped += messages
            done += sizes[i]
            report(Progress("tokenize", done, total, tokens))
    _log.debug("ray: %d slices in %.1f s", count, time.monotonic() - began)
    return skipped, tokens
