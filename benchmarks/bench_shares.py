"""What cutting shares at documents costs: one epoch read as S shares, against the same epoch
read unsharded, in the same run.

Shares are intervals of the epoch's documents (``plan.EpochShares``): a member on a boundary
between two shares is read (decompressed) by both, each keeping its part, so an epoch of S
shares decompresses at most S - 1 members more than an unsharded one, i.e. at most
(1 + S / members) times its bytes. For each S this reads every share of one epoch in turn
(each a fresh iterator with ``--workers`` processes, as S ranks of one machine would), and
reports the documents delivered and left out, the members read, the decompressed bytes of
those members (each member's inner tar, measured once with ``lzma``), their ratio to the
unsharded epoch's and that bound, and the wall time as a ratio to the unsharded epoch's
(rounds interleaved, the median kept).

Usage: python benchmarks/bench_shares.py [CORPUS] [--shares 1,8,64,180] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import time

from openwebtext import Corpus, Loader
from openwebtext.plan import EpochShares, plan
from openwebtext.stream import ensure_counts


def member_sizes(corpus: Corpus) -> list[int]:
    """Bytes of every member decompressed (its inner tar)."""
    sizes = []
    for unit in corpus.units:
        with open(unit.path, "rb") as f:
            f.seek(unit.offset)
            sizes.append(len(lzma.decompress(f.read(unit.size))))
    return sizes


def read_epoch(corpus: Corpus, shares: int, workers: int) -> tuple[float, int, int, int]:
    """Seconds, documents, documents left out and members read by all shares of epoch 0."""
    start = time.perf_counter()
    documents = dropped = units = 0
    for rank in range(shares):
        loader = Loader(corpus, rank=rank, world_size=shares, workers=workers, seed=0)
        with loader.iter() as it:
            documents += sum(1 for _ in it)
            dropped += it.stats.dropped_documents
            units += it.stats.units
    return time.perf_counter() - start, documents, dropped, units


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?")
    parser.add_argument("--shares", default="1,8,64,180")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.corpus is None:
        from openwebtext.synth import bench_corpus

        args.corpus = str(bench_corpus())
    counts = [int(s) for s in args.shares.split(",")]
    corpus = ensure_counts(Corpus.open(args.corpus), Loader(args.corpus, world_size=2).options)
    assert corpus.counts is not None
    sizes = member_sizes(corpus)
    members = len(corpus.units)
    order = plan(members, shuffle=True, seed=0, epoch=0)
    epoch = EpochShares(order, corpus.counts.documents)
    times: dict[int, list[float]] = {s: [] for s in counts}
    read: dict[int, tuple[int, int, int]] = {}
    for _ in range(args.rounds):  # interleaved: the machine's noise falls on every S alike
        for s in counts:
            seconds, documents, dropped, units = read_epoch(corpus, s, args.workers)
            times[s].append(seconds)
            read[s] = (documents, dropped, units)
    whole = sum(sizes)
    base = statistics.median(times[1]) if 1 in times else None
    rows = []
    for s in counts:
        planned = [epoch.share(r, s, "drop" if s > 1 else None) for r in range(s)]
        decompressed = sum(sizes[u] for share in planned for u in share.units)
        documents, dropped, units = read[s]
        rows.append({
            "shares": s,
            "documents": documents,
            "dropped": dropped,
            "members_read": units,
            "decompressed_bytes": decompressed,
            "bytes_ratio": round(decompressed / whole, 4),
            "bound": round(1 + s / members, 4),
            "seconds": round(statistics.median(times[s]), 3),
            "time_ratio": None if base is None else round(statistics.median(times[s]) / base, 3),
        })  # fmt: skip
    print(json.dumps({"corpus": args.corpus, "members": members, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
