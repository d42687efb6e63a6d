"""The children ``python -m openwebtext.bench run-one`` and ``... ceiling-one``.

The loader child reports documents, text bytes, the compressed bytes of the members it
consumed, the time from spawn to its first document, and its own (consumer) CPU seconds.
The ceiling child runs N processes that only ``pread`` and decompress those same members:
no tar parsing, no transfer, no text. It does so once with each decoder available — one-shot
``lzma.decompress`` (faster than the library's bounded, streaming decompressor) and the
``xz -dc`` program when it is installed — and reports the faster: the ceiling is the best
this machine can decompress, not the library's own way of doing it. Each prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import lzma
import multiprocessing
import os
import shutil
import subprocess
import time
from collections.abc import Callable

from .. import Corpus, Loader, Options, Unit
from ..formats import XZ, decompress
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


#: The decoders the ceiling tries, by the name it reports.
LZMA, XZ_PROGRAM = "lzma.decompress", "xz -dc"


def _pread(unit: Unit) -> bytes:
    fd = os.open(unit.path, os.O_RDONLY)
    try:
        return os.pread(fd, unit.size, unit.offset)
    finally:
        os.close(fd)


def _with_lzma(unit: Unit) -> int:
    """One-shot decompression: the fastest way Python has (no size bound, no streaming)."""
    raw = _pread(unit)
    if unit.kind == XZ:
        return len(lzma.decompress(raw))
    return len(decompress(raw, unit.kind, Options.max_member_bytes))


def _with_xz(unit: Unit) -> int:
    """``xz -dc`` (single-threaded, like one worker) on an xz member; others as _with_lzma."""
    if unit.kind != XZ:
        return _with_lzma(unit)
    done = subprocess.run(
        ["xz", "-dc", "-T1"], input=_pread(unit), stdout=subprocess.PIPE, check=True
    )
    return len(done.stdout)


def _decoders() -> dict[str, Callable[[Unit], int]]:
    decoders: dict[str, Callable[[Unit], int]] = {LZMA: _with_lzma}
    if shutil.which("xz"):
        decoders[XZ_PROGRAM] = _with_xz
    return decoders


def _ceiling_one(args: argparse.Namespace) -> int:
    """Child: N processes only read and decompress the members, once per decoder; print
    one JSON line, with ``extra_s``: the time of the slower decoders, which the parent takes
    off this run's wall time."""
    units = _plan_units(Corpus.open(args.paths), args.seed, args.units)
    seconds: dict[str, float] = {}
    decompressed = 0
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        for name, decoder in _decoders().items():
            start = _now()
            decompressed = sum(pool.imap_unordered(decoder, units))
            seconds[name] = _now() - start
    fastest = min(seconds, key=seconds.__getitem__)
    report = {
        "units": len(units),
        "compressed_bytes": sum(u.size for u in units),
        "decompressed_bytes": decompressed,
        "decompress_s": seconds[fastest],
        "decoder": fastest,
        "decoders_s": seconds,
        "extra_s": sum(seconds.values()) - seconds[fastest],
    }
    print(json.dumps(report))
    return 0
