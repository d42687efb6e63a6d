"""The children ``python -m openwebtext.bench run-one`` and ``... ceiling-one``.

The loader child reports documents, text bytes, the compressed bytes of the members it
consumed, the time from spawn to its first document, and its own (consumer) CPU seconds.
The ceiling child runs N processes that only ``pread`` and decompress those same members:
no tar parsing, no transfer, no text. It does so once with each decoder available — one-shot
``lzma.decompress`` (faster than the library's bounded, streaming decompressor) and the
``xz -dc`` program when it is installed — and reports the faster: the ceiling is the best
this machine can decompress, not the library's own way of doing it. Each prints one JSON line.
A parquet corpus's ceiling is pyarrow reading the same row groups, a JSON lines corpus's
``json.loads`` over the same lines (``bench.tables``).

For a corpus behind URLs, the ceiling is "fetch + decompress": the same N processes fetch
the same members through the library's ranged reads (``ranges.RangeReader``: the same
requests in flight, the same member cache), each its share of the members in plan order
(as the loader deals them), and decompress them as above; only tar parsing, text and the
transfer to a consumer are left out. Storage options come from ``STORAGE_ENV`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import lzma
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from openwebtext import Corpus, Loader, Options
from openwebtext.bench.common import STARTED_ENV, STORAGE_ENV, now
from openwebtext.bench.tables import table_decoders
from openwebtext.formats import XZ, decompress
from openwebtext.plan import plan
from openwebtext.records import Unit
from openwebtext.source import RangeReader, Storage, is_url


def _open(args: argparse.Namespace) -> Corpus:
    """The corpus, read with the options the parent gave (``STORAGE_ENV``, ``--cache-*``)."""
    options: dict[str, Any] | None = json.loads(os.environ.get(STORAGE_ENV) or "null")
    return Corpus.open(
        args.paths,
        storage_options=options or None,
        cache_dir=args.cache_dir,
        cache_size=args.cache_size,
        text_column=args.text_column,
    )


def _plan_units(corpus: Corpus, seed: int, count: int | None) -> list[Unit]:
    """The first ``count`` units (all when None) in the loader's order for ``seed``."""
    order = plan(len(corpus.units), shuffle=True, seed=seed)
    return [corpus.units[i] for i in order[:count]]


def run_one(args: argparse.Namespace) -> int:
    """Child: stream the documents through the loader, print one JSON line."""
    started = float(os.environ.get(STARTED_ENV, now()))
    corpus = _open(args)
    cpu = time.process_time()
    first_document_s = None
    with Loader(corpus, workers=args.workers, seed=args.seed, take=args.take).iter() as docs:
        for _ in docs:
            first_document_s = now() - started
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


def _lzma_bytes(raw: bytes, unit: Unit) -> int:
    if unit.kind == XZ:
        return len(lzma.decompress(raw))
    return len(decompress(raw, unit.kind, Options.max_member_bytes))


def _xz_bytes(raw: bytes, unit: Unit) -> int:
    if unit.kind != XZ:
        return _lzma_bytes(raw, unit)
    done = subprocess.run(["xz", "-dc", "-T1"], input=raw, stdout=subprocess.PIPE, check=True)
    return len(done.stdout)


def _with_lzma(unit: Unit) -> int:
    """One-shot decompression: the fastest way Python has (no size bound, no streaming)."""
    return _lzma_bytes(_pread(unit), unit)


def _with_xz(unit: Unit) -> int:
    """``xz -dc`` (single-threaded, like one worker) on an xz member; others as _with_lzma."""
    return _xz_bytes(_pread(unit), unit)


def _decoders(units: list[Unit]) -> dict[str, Callable[[Unit], int]]:
    tables = table_decoders(units)  # parquet: pyarrow itself; JSON lines: json.loads
    if tables is not None:
        return tables
    decoders: dict[str, Callable[[Unit], int]] = {LZMA: _with_lzma}
    if shutil.which("xz"):
        decoders[XZ_PROGRAM] = _with_xz
    return decoders


#: The remote ceiling's decoders, on bytes already fetched.
_BYTE_DECODERS: dict[str, Callable[[bytes, Unit], int]] = {
    LZMA: _lzma_bytes,
    XZ_PROGRAM: _xz_bytes,
}
#: The corpus's storage, set before the pool forks (so its options never travel in a task).
_storage: list[Storage | None] = [None]


def _fetch_and_decode(task: tuple[str, list[Unit]]) -> int:
    """One process's share of a remote ceiling: fetch its members by range, ``prefetch``
    of them in flight as in a loader worker, and decompress each with the named decoder."""
    name, units = task
    decode = _BYTE_DECODERS[name]
    reader = RangeReader(storage=_storage[0])
    ahead = Options.prefetch + 1  # the unit being read and those queued behind it
    try:
        total = 0
        for k, unit in enumerate(units):
            reader.prefetch(units[k : k + ahead])
            total += decode(reader.read(unit), unit)
        return total
    finally:
        reader.close()


def _run_decoders(
    pool: Any, units: list[Unit], workers: int, remote: bool
) -> tuple[dict[str, float], int]:
    """Seconds per decoder, and the bytes decompressed."""
    seconds: dict[str, float] = {}
    decompressed = 0
    for name, decoder in _decoders(units).items():
        start = now()
        if remote:
            shares = [(name, units[k::workers]) for k in range(workers)]
            decompressed = sum(pool.imap_unordered(_fetch_and_decode, shares))
        else:
            decompressed = sum(pool.imap_unordered(decoder, units))
        seconds[name] = now() - start
    return seconds, decompressed


def ceiling_one(args: argparse.Namespace) -> int:
    """Child: N processes only read and decompress the members, once per decoder; print
    one JSON line, with ``extra_s``: the time of the slower decoders, which the parent takes
    off this run's wall time."""
    corpus = _open(args)
    units = _plan_units(corpus, args.seed, args.units)
    remote = any(is_url(u.path) for u in units)
    if remote and table_decoders(units) is not None:
        print("owt bench: no ceiling for remote parquet or JSON lines yet", file=sys.stderr)
        return 2
    _storage[0] = corpus.storage
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        seconds, decompressed = _run_decoders(pool, units, args.workers, remote)
    fastest = min(seconds, key=seconds.__getitem__)
    report = {
        "units": len(units),
        "compressed_bytes": sum(u.size for u in units),
        "decompressed_bytes": decompressed,
        "decompress_s": seconds[fastest],
        "decoder": fastest,
        "ceiling": "fetch + decompress" if remote else "decompression only",
        "decoders_s": seconds,
        "extra_s": sum(seconds.values()) - seconds[fastest],
    }
    print(json.dumps(report))
    return 0
