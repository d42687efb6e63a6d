"""Packing benchmark (issue 21): concat vs best fit, with and without segments.

For each seq_len (1024, 2048) and packing, one fresh child reads a whole epoch of GPT-2 token
batches (``Loader.batches``, ``--workers`` worker processes) and reports batches/s; with
segments it also reports the share of documents cut (a document whose ids lie in more than one
row) and the share of padding ids. Best fit without segments costs what it costs with them (the
rows are the same), so its cut and padding shares are those of its segments run.

    python benchmarks/bench_packing.py [CORPUS ...] [--workers 2] [--window 4096] [--json out]

With no CORPUS, a small generated corpus (``openwebtext.synth``: 1 subset x 8 members x 200
documents) is written once into the cache folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np

from openwebtext import Loader

RUNS = (("concat", False), ("concat", True), ("bestfit", False), ("bestfit", True))


def child(args: argparse.Namespace) -> None:
    """Read one epoch of batches; print one line of JSON."""
    loader = Loader(args.corpus, tokenizer="gpt2", workers=args.workers, seed=0)
    batches = cut = starts = padding = ids = 0
    eot = 50256
    counting = 0.0  # the statistics below are the benchmark's own work: not the loader's
    start = time.perf_counter()
    with loader.batches(
        args.seq_len, args.batch_size, segments=args.segments, packing=args.packing,
        window=args.window,
    ) as packed:  # fmt: skip
        for batch in packed:
            batches += 1
            if not args.segments:
                continue
            counted = time.perf_counter()
            tokens, segments, positions = batch
            padding += int((segments == 0).sum())
            ids += segments.size
            for row, seg, pos in zip(tokens, segments, positions, strict=True):
                # A document starts where its position is 0; it is whole in the row if its
                # last id there is an end-of-text: each cut document has one start not whole.
                real = seg > 0
                first = np.flatnonzero(np.diff(seg, prepend=-1) != 0)
                last = np.append(first[1:], len(seg)) - 1
                begins = (pos[first] == 0) & real[first]
                starts += int(begins.sum())
                cut += int((begins & (row[last] != eot)).sum())
            counting += time.perf_counter() - counted
    seconds = time.perf_counter() - start - counting
    report: dict[str, Any] = {"batches": batches, "seconds": seconds, "counting_s": counting}
    report["batches_per_s"] = batches / seconds
    if args.segments:
        report["cut_share"] = cut / max(1, starts)
        report["padding_share"] = padding / max(1, ids)
    print(json.dumps(report))


def corpus_paths(given: list[str]) -> list[str]:
    if given:
        return given
    from openwebtext.files import cache_root
    from openwebtext.synth import COMPLETE_MARKER, corpus_dirname, write_corpus

    path = cache_root() / corpus_dirname(1, 8, 200, 0)
    if not (path / COMPLETE_MARKER).is_file():
        print(f"generating a small corpus in {path} ...", file=sys.stderr, flush=True)
        write_corpus(path, subsets=1, members=8, docs=200, seed=0)
    return [str(path)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="*")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--seq-lens", default="1024,2048")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--packing", help=argparse.SUPPRESS)
    parser.add_argument("--segments", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    paths = corpus_paths(args.corpus)
    common.warm_page_cache(paths)
    results = []
    for seq_len in map(int, args.seq_lens.split(",")):
        for packing, segments in RUNS:
            report = common.run_child(
                __file__,
                "batches",
                [*paths, "--workers", str(args.workers), "--batch-size", str(args.batch_size),
                 "--window", str(args.window), "--seq-len", str(seq_len),
                 "--packing", packing, "--segments", str(int(segments))],
            )  # fmt: skip
            report.update(seq_len=seq_len, packing=packing, segments=segments)
            results.append(report)
            shares = ""
            if segments:
                shares = (
                    f", documents cut {report['cut_share']:.1%}, "
                    f"padding {report['padding_share']:.2%}"
                )
            print(
                f"seq_len {seq_len} {packing:8s} segments={segments!s:5s} "
                f"{report['batches_per_s']:8.2f} batches/s ({report['batches']} batches){shares}",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
