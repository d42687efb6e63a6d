"""What an engine that runs the slices of one prepare run elsewhere (``openwebtext.ray``)
needs of this package: how many bytes of input each slice holds, where its folder is, whether
a whole run is already finished, and how to drop the slices once merged.

Running one slice is ``prepare(..., shard=(i, n))`` and joining them ``merge``; the slices'
bounds are ``plan.shard_range``'s, as for ``owt tokenize --shard``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from openwebtext.index import Corpus
from openwebtext.options import as_int, int_at_least
from openwebtext.plan import shard_range
from openwebtext.prepare import outputs
from openwebtext.prepare.config import (
    PrepareOptions,
    Report,
    corpus_identity,
    run_config,
    unit_order,
)
from openwebtext.prepare.lock import hold
from openwebtext.prepare.meta import finished_run
from openwebtext.prepare.run import tidy
from openwebtext.source import Storage
from openwebtext.tokenizer import load_tokenizer

__all__ = ["finished_report", "lock_output", "remove_folder", "slice_folders", "slice_sizes"]


def slice_sizes(corpus: Corpus, options: PrepareOptions, count: int) -> list[int]:
    """The compressed bytes of the units of each of ``count`` slices of a run.

    Works out ``corpus_identity`` (a read at every member's end) here, once: the engine's
    tasks get the corpus pickled with it, and each would read them all again."""
    _ = corpus_identity(corpus, options)
    order = unit_order(corpus, options)
    units = corpus.units
    sizes = []
    for index in range(count):
        first, stop = shard_range(len(order), index, count)
        sizes.append(sum(units[u].size for u in order[first:stop]))
    return sizes


def slice_folders(out: str | os.PathLike[str], under: str, count: int) -> list[outputs.Location]:
    """The folders (or URLs) of ``count`` slices of one run into ``out``.

    Write slice ``i`` with ``prepare(corpus, folders[i], options, shard=(i, count))`` (on
    any machine), then join them with ``merge(folders, out)``. The Ray engine keeps its
    slices so, under ``.owt-ray``.

    Args:
        out: The run's output folder or URL.
        under: The folder under ``out`` that holds the slices.
        count: How many slices.

    Returns:
        ``out/under/IIIII-of-NNNNN`` for each slice, in order.

    Raises:
        ValueError: ``count`` is not an int >= 1; ``under`` is not a folder's name inside
            ``out`` (empty, absolute, or with ``..``).
    """
    count = as_int(count)
    if not int_at_least(count, 1):
        raise ValueError(f"count must be an int >= 1, not {count!r}")
    under = os.fspath(under) if isinstance(under, str | os.PathLike) else ""
    if not under or under.startswith("/") or ".." in under.replace("\\", "/").split("/"):
        raise ValueError(f"under must be a folder inside out, not {under!r}")
    root = outputs.join(outputs.location(out), under)
    return [outputs.join(root, f"{i:05d}-of-{count:05d}") for i in range(count)]


def remove_folder(out: str | os.PathLike[str], under: str, store: Storage | None = None) -> None:
    """Remove ``out/under`` and everything in it (the slices, once merged), if it is there."""
    outputs.remove(outputs.join(outputs.location(out), under), store)


@contextlib.contextmanager
def lock_output(out: str | os.PathLike[str], wait: bool = False) -> Iterator[None]:
    """Hold the lock of ``out`` (its folder, or the staging folder of a URL: ``lock``) for
    the block: for a whole run whose slices run elsewhere, so that another run into ``out``
    is refused at once, not at its merge. The merge, in the same thread, re-enters it.

    Raises:
        PrepareError: another run holds it (not ``wait``).
    """
    target = outputs.location(out)
    folder = target if isinstance(target, Path) else outputs.staging(target)
    with hold(folder, wait):
        yield


def finished_report(
    corpus: Corpus, out: str | os.PathLike[str], options: PrepareOptions
) -> Report | None:
    """The report of a whole run of ``corpus``/``options`` that ``out`` already holds the
    finished files of (``Report.already``), or None. What interrupted runs left beside them
    is swept when the lock can be taken (``run.tidy``), as ``prepare`` does."""
    config = run_config(corpus, options, load_tokenizer(options.tokenizer))
    target = outputs.location(out)
    done = finished_run(target, config, corpus.storage)
    if done is not None and isinstance(target, Path):
        tidy(target)
    elif done is not None and isinstance(target, str):
        tidy(outputs.staging(target), config)
    return done
