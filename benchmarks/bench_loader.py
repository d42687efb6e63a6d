"""Loader throughput as a ratio to the decompression ceiling, measured in one run.

For each worker count N it times, interleaved and repeated:

- ceiling: N processes that only read and decompress the same members with
  Python's ``lzma`` (no tar parsing, no transfer, no text);
- loader: ``openwebtext.Loader`` with N workers, shuffled (seed 0), every
  document's text built as ``str`` in the consumer; the consumer's own CPU
  time per document is reported;
- reference (``--reference``): the seed's ``OpenWebTextLoader`` with N workers.

Usage: python benchmarks/bench_loader.py [CORPUS] [--workers 1,2] [--repeat 3] [--reference]
With no corpus, the built-in generated one (337 MB of text) is made once and used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from openwebtext import Corpus, Loader
from openwebtext.formats import decompress

SEED_LOADER = Path(__file__).resolve().parents[2] / "shared" / "seed" / "openwebtext.py"
_UNITS: tuple[Any, ...] = ()


def _decompress_unit(index: int) -> int:
    unit = _UNITS[index]
    with open(unit.path, "rb") as f:
        raw = os.pread(f.fileno(), unit.size, unit.offset)
    return len(decompress(raw, unit.kind, 1 << 40))


def ceiling(corpus: Corpus, workers: int) -> dict[str, float]:
    """Wall seconds for ``workers`` processes to decompress every member once."""
    global _UNITS
    _UNITS = corpus.units
    start = time.perf_counter()
    with mp.get_context("fork").Pool(workers) as pool:
        total = sum(pool.imap_unordered(_decompress_unit, range(len(corpus.units))))
    return {"seconds": time.perf_counter() - start, "decompressed_bytes": total}


def loader(corpus: Corpus, workers: int) -> dict[str, float]:
    start = time.perf_counter()
    cpu = time.process_time()
    documents = 0
    with Loader(corpus, workers=workers, seed=0).iter() as it:
        for _ in it:
            documents += 1
        text_bytes = it.stats.text_bytes
    return {
        "seconds": time.perf_counter() - start,
        "consumer_cpu_us_per_doc": (time.process_time() - cpu) / max(1, documents) * 1e6,
        "documents": documents,
        "text_bytes": text_bytes,
    }


def reference(corpus: Corpus, workers: int) -> dict[str, float]:
    spec = importlib.util.spec_from_file_location("seed_openwebtext", SEED_LOADER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    subsets = sorted({Path(u.path) for u in corpus.units})
    start = time.perf_counter()
    documents = 0
    for _ in module.OpenWebTextLoader(subsets, num_workers=workers):
        documents += 1
    return {"seconds": time.perf_counter() - start, "documents": documents}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference", action="store_true", help="also time the seed's loader")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    args = parser.parse_args()
    if args.corpus is None:
        from openwebtext.synth import default_corpus

        args.corpus = str(default_corpus())
    corpus = Corpus.open(args.corpus)
    counts = [int(w) for w in args.workers.split(",")]
    kinds = {"ceiling": ceiling, "loader": loader}
    if args.reference and SEED_LOADER.exists():
        kinds["reference"] = reference
    results: dict[str, dict[int, list[dict[str, float]]]] = {
        k: {n: [] for n in counts} for k in kinds
    }
    ceiling(corpus, max(counts))  # warm the page cache
    for _ in range(args.repeat):
        for n in counts:
            for name, run in kinds.items():
                results[name][n].append(run(corpus, n))
    documents = results["loader"][counts[0]][0]["documents"]
    text_bytes = results["loader"][counts[0]][0]["text_bytes"]
    print(
        f"corpus: {args.corpus}: {len(corpus.units)} members, {documents} documents, "
        f"{text_bytes / 1e6:.0f} MB of text, {corpus.compressed_bytes / 1e6:.0f} MB compressed"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, repeat {args.repeat} (median)"
    )
    print()
    print(
        "| workers | ceiling docs/s | loader docs/s | loader / ceiling | consumer CPU µs/doc |"
        + (" reference docs/s | reference / ceiling |" if "reference" in kinds else "")
    )
    print("|---|---|---|---|---|" + ("---|---|" if "reference" in kinds else ""))
    summary: dict[str, Any] = {}
    for n in counts:
        ceil_s = statistics.median(r["seconds"] for r in results["ceiling"][n])
        load_s = statistics.median(r["seconds"] for r in results["loader"][n])
        cpu = statistics.median(r["consumer_cpu_us_per_doc"] for r in results["loader"][n])
        row = (
            f"| {n} | {documents / ceil_s:,.0f} | {documents / load_s:,.0f} | "
            f"{ceil_s / load_s:.2f} | {cpu:.2f} |"
        )
        summary[str(n)] = {
            "ceiling_s": ceil_s,
            "loader_s": load_s,
            "ratio": ceil_s / load_s,
            "consumer_cpu_us_per_doc": cpu,
        }
        if "reference" in kinds:
            ref_s = statistics.median(r["seconds"] for r in results["reference"][n])
            row += f" {documents / ref_s:,.0f} | {ceil_s / ref_s:.2f} |"
            summary[str(n)]["reference_s"] = ref_s
        print(row)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": results}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
