"""Pass 2 of a ``nanogpt`` run (or merge): copy every document from the corpus-order files
(``tokens.bin``, ``lengths.bin``) into ``val.bin`` and ``train.bin`` in the order of
``numpy.random.default_rng(val_seed).permutation(n)``, as nanoGPT's ``train_test_split``
does; resumable at any chunk."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from openwebtext import codec
from openwebtext.prepare.config import BINS, LENGTH, Progress
from openwebtext.prepare.record import Run

__all__ = ["permute"]

_CHUNK = 1 << 16  # documents copied between two looks at the clock


def permute(
    run: Run,
    sources: Sequence[tuple[Path, Path]],
    itemsize: int,
    val_fraction: float,
    val_seed: int,
) -> None:
    """Pass 2: copy documents from ``sources`` (ids, lengths) in permutation order.

    As ``datasets.Dataset.train_test_split(test_size=val_fraction, seed=val_seed)``:
    ``n_val = ceil(val_fraction * n)``, val is ``perm[:n_val]``, train ``perm[n_val:]``.
    """
    lengths_per = [np.fromfile(lengths, dtype=LENGTH) for _, lengths in sources]
    lengths = np.concatenate(lengths_per) if lengths_per else np.zeros(0, LENGTH)
    n = len(lengths)
    n_val = math.ceil(val_fraction * n)
    perm = np.random.default_rng(val_seed).permutation(n)
    nbytes = lengths * itemsize
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(nbytes[:-1], out=starts[1:])
    # Where each source's documents begin, in the documents' global numbering and in bytes.
    first_doc = np.cumsum([0] + [len(x) for x in lengths_per])
    first_byte = starts[np.minimum(first_doc[:-1], max(n - 1, 0))] if n else np.zeros(1, np.int64)
    val_tokens = int(lengths[perm[:n_val]].sum())
    tokens = {"train": int(lengths.sum()) - val_tokens, "val": val_tokens}
    documents = {"train": n - n_val, "val": n_val}
    run.counts = codec.replace(run.counts, documents=documents, tokens=tokens)
    total = int(nbytes.sum())
    position = run.record.position
    sizes = run.record.sizes
    parts = {n: run.workdir.part(n, sizes.get(n, 0)) for n in BINS}
    fds = [os.open(tokens, os.O_RDONLY) for tokens, _ in sources]
    done = first = sum(parts[n].size for n in BINS)
    try:
        last = time.monotonic()
        while position < n:
            end = min(position + _CHUNK, n if position >= n_val else n_val)
            part = parts["val.bin" if position < n_val else "train.bin"]
            docs = perm[position:end]
            source = np.searchsorted(first_doc, docs, side="right") - 1
            local = starts[docs] - first_byte[source]
            for s, offset, size in zip(
                source.tolist(), local.tolist(), nbytes[docs].tolist(), strict=True
            ):
                part.write(codec.pread_all(fds[s], size, offset))
            done += int(nbytes[docs].sum())
            position = end
            if position == n or time.monotonic() - last >= run.checkpoint_seconds:
                run.checkpoint(parts, position=position)
                last = time.monotonic()
            run.progress(Progress("permute", done, total, (done - first) // itemsize))
        run.checkpoint(parts, position=n)
    finally:
        for fd in fds:
            os.close(fd)
        for p in parts.values():
            p.close()
