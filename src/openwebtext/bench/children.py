"""The children ``python -m openwebtext.bench run-one`` and ``... ceiling-one``.

The loader child reports documents, text bytes, the compressed bytes of the members it
consumed, the time from spawn to its first document, and its own (consumer) CPU seconds.
The ceiling child runs N processes that only ``pread`` and decompress those same members:
no tar parsing, no transfer, no text. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time

from .. import Corpus, Loader, Options, Unit
from ..formats import decompress
from ..plan import plan
from .common import STARTED_ENV, _now


def _plan_units(corpus: Corpus, seed: int, count: int | None) -> list[Unit]:
    """The first ``count`` units (all when None) in the loader's order for ``seed``."""
    order = plan(len(corpus.units), shuffle=True, seed=seed)
    return [corpus.units[i] for i in order[:count]]


def _run_one(args: argparse.Namespace) -> int:
    """Child: stream the documents through the loader, print one JSON line."""
    started = float(os.environ.get(STARTED_ENV, _now()))
    corpus = Corpus.open(args.paths)
    cpu = time.process_time()
    first_document_s = None
    with Loader(corpus, workers=args.workers, seed=args.seed, take=args.take).iter() as docs:
        for _ in docs:
            first_document_s = _now() - started
            break
        for _ in docs:
            pass
        stats = docs.stats
    report = {
        "documents": stats.documents,
        "text_bytes": stats.text_bytes,
        "units": stats.units,
        "compressed_bytes": sum(u.size for u in _plan_units(corpus, args.seed, stats.units)),
        "first_document_s": first_document_s,
        "consumer_cpu_s": time.process_time() - cpu,
    }
    print(json.dumps(report))
    return 0


def _decompress_unit(unit: Unit) -> int:
    fd = os.open(unit.path, os.O_RDONLY)
    try:
        raw = os.pread(fd, unit.size, unit.offset)
    finally:
        os.close(fd)
    return len(decompress(raw, unit.kind, Options.max_member_bytes))


def _ceiling_one(args: argparse.Namespace) -> int:
    """Child: N processes only read and decompress the members; print one JSON line."""
    units = _plan_units(Corpus.open(args.paths), args.seed, args.units)
    start = _now()
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        decompressed = sum(pool.imap_unordered(_decompress_unit, units))
    report = {
        "units": len(units),
        "compressed_bytes": sum(u.size for u in units),
        "decompressed_bytes": decompressed,
        "decompress_s": _now() - start,
    }
    print(json.dumps(report))
    return 0
