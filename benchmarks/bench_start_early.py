"""The first batch of ``Loader.batches`` after a pause, with and without ``start()`` (issue 37).

Usage: python benchmarks/bench_start_early.py [CORPUS ...] [--sleep 3] [--rounds 3]
    [--workers 2] [--tokenizer gpt2] [--seq-len 1024] [--batch-size 8] [--json]

A training script makes its batches, then loads a model or a checkpoint, then asks for the
first batch. Without ``start()`` the workers start at that first ``next()``: the wait is the
time to read, decompress and tokenize what the first batch needs (best fit: its first window of
documents) and pack it. With ``start()`` (called right after ``Loader.batches``) that reading
happens during the pause, and ``next()`` only packs. For each packing (concat; best fit with
segments), ``cold`` times ``next()`` after ``--sleep`` seconds asleep, ``started`` the same
after ``start()``; the loader's set-up is outside the timing. Rounds alternate the cases;
medians are printed (and one JSON line with ``--json``).

With no CORPUS, the generated corpus of ``bench_gpu_feed.py`` (``openwebtext.synth``, 1 subset x
24 members x 200 documents, written once into the cache folder); the GPT-2 tokenizer is the
offline one: nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from openwebtext import Loader


def generated_corpus() -> list[str]:
    from openwebtext.files import cache_root
    from openwebtext.synth import COMPLETE_MARKER, corpus_dirname, write_corpus

    path = cache_root() / corpus_dirname(1, 24, 200, 0)
    if not (path / COMPLETE_MARKER).is_file():
        print(f"generating a corpus in {path} ...", file=sys.stderr, flush=True)
        write_corpus(path, subsets=1, members=24, docs=200, seed=0, workers=os.cpu_count())
    return [str(path)]


def first_batch_ms(args: argparse.Namespace, packing: str, start: bool) -> float:
    """Milliseconds ``next()`` took for the first batch, after ``--sleep`` seconds (after
    ``start()`` or not)."""
    loader = Loader(args.corpus, tokenizer=args.tokenizer, workers=args.workers, seed=0)
    options: dict[str, Any] = {"packing": "bestfit", "segments": True}
    with loader.batches(args.seq_len, args.batch_size, **(options if packing == "bestfit" else {}))\
            as batches:  # fmt: skip
        if start:
            batches.start()
        time.sleep(args.sleep)
        begin = time.perf_counter()
        next(batches)
        return 1000 * (time.perf_counter() - begin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="*")
    parser.add_argument("--sleep", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tokenizer", default="gpt2")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="also print one line of JSON")
    args = parser.parse_args()
    args.corpus = args.corpus or generated_corpus()
    cases = [(p, s) for p in ("concat", "bestfit") for s in (False, True)]
    times: dict[tuple[str, bool], list[float]] = {case: [] for case in cases}
    first_batch_ms(args, "concat", False)  # warm: the page cache, the tokenizer's files
    for r in range(args.rounds):
        for case in cases[r % len(cases) :] + cases[: r % len(cases)]:
            times[case].append(first_batch_ms(args, *case))
    print(f"{args.corpus}: workers {args.workers}, {args.tokenizer}, seq_len {args.seq_len}, "
          f"batch {args.batch_size}, {args.sleep} s asleep, median of {args.rounds}")  # fmt: skip
    print("| packing | first batch, cold (ms) | after start() (ms) | cold ÷ started |")
    print("|---|---|---|---|")
    report: dict[str, Any] = {"sleep_s": args.sleep, "workers": args.workers}
    for packing in ("concat", "bestfit"):
        cold = statistics.median(times[(packing, False)])
        started = statistics.median(times[(packing, True)])
        print(f"| {packing} | {cold:.1f} | {started:.1f} | {cold / started:.0f} |")
        report[packing] = {"cold_ms": times[(packing, False)], "started_ms": times[(packing, True)]}
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
