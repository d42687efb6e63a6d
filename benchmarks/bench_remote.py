"""Reading over HTTP against reading the same files locally, in the same run.

Serves a generated corpus with the tests' range HTTP server (``tests/remote_servers.py``)
on 127.0.0.1, with 0 and 40 ms added to every request, and reads one whole epoch
(seed 0) from the local folder and from the server, at 1 and 2 workers and
with the default prefetch (2 units per worker) and 4. Rounds are interleaved;
the table shows medians, and the ratio to the local reading of the same round.
Also: requests and bytes fetched per document, and an estimate for the real corpus.

Usage: python benchmarks/bench_remote.py [--members 24] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from openwebtext import Corpus, Loader
from openwebtext.source import configure
from openwebtext.synth import write_corpus

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from remote_servers import RangeServer


def epoch(corpus: Corpus, workers: int, prefetch: int) -> tuple[float, int]:
    start = time.perf_counter()
    n = sum(1 for _ in Loader(corpus, seed=0, workers=workers, prefetch=prefetch))
    return time.perf_counter() - start, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "corpus"
        write_corpus(root, subsets=2, members=args.members // 2, docs=390, seed=0, workers=2)
        configure(None)
        local = Corpus.open(str(root))
        size = sum(p.stat().st_size for p in root.glob("*.tar"))
        rows: dict[tuple[str, int, int], list[float]] = {}
        fetched: dict[tuple[str, int, int], tuple[float, float]] = {}
        docs = 0
        with RangeServer(root) as server:
            remote = Corpus.open(server.url + "/")  # indexed once, before timing
            for _ in range(args.rounds):
                for workers in (1, 2):
                    base, docs = epoch(local, workers, 2)
                    rows.setdefault(("local", workers, 2), []).append(base)
                    for latency in (0.0, 0.04):
                        for prefetch in (2, 4):
                            server.latency = latency
                            server.reset_counts()
                            took, n = epoch(remote, workers, prefetch)
                            assert n == docs
                            kind = f"http {latency * 1000:.0f} ms"
                            rows.setdefault((kind, workers, prefetch), []).append(base / took)
                            fetched[(kind, workers, prefetch)] = (
                                server.requests / n,
                                server.bytes_sent / n,
                            )
        print(
            f"corpus: {docs} documents, {len(local.units)} members, {size / 1e6:.1f} MB "
            f"compressed ({size / docs:,.0f} B/doc); {args.rounds} rounds\n"
        )
        print(
            "| read from | workers | prefetch | docs/s | ÷ local (min–max) "
            "| requests/doc | bytes/doc |"
        )
        print("|---|---|---|---|---|---|---|")
        locals_ = {w: statistics.median(rows[("local", w, 2)]) for w in (1, 2)}
        for (kind, workers, prefetch), values in rows.items():
            if kind == "local":
                print(
                    f"| local | {workers} | {prefetch} | {docs / locals_[workers]:,.0f} "
                    "| 1 | – | – |"
                )
                continue
            ratio = statistics.median(values)
            requests, nbytes = fetched[(kind, workers, prefetch)]
            print(
                f"| {kind} | {workers} | {prefetch} | {docs / locals_[workers] * ratio:,.0f} "
                f"| {ratio:.2f} ({min(values):.2f}–{max(values):.2f}) "
                f"| {requests:.4f} | {nbytes:,.0f} |"
            )
        estimate(size / docs)


def estimate(bytes_per_doc: float) -> dict[str, Any]:
    """The full corpus: 12.6 GB compressed, 8 M documents, ~20,600 members."""
    total, documents = 12.6e9, 8.0e6
    print(
        f"\nfull corpus: {total / documents:,.0f} compressed B/doc "
        f"(this corpus: {bytes_per_doc:,.0f})"
    )
    out = {}
    for gbit in (1, 10):
        seconds = total * 8 / (gbit * 1e9)
        out[gbit] = seconds
        print(
            f"- {gbit} Gbit/s: {seconds / 60:.1f} min for the 12.6 GB "
            f"({documents / seconds:,.0f} docs/s the link can feed)"
        )
    return out


if __name__ == "__main__":
    main()
