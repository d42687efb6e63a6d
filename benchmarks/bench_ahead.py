"""How much of a training loop's time goes to waiting for batches, with and without ``ahead``
(issue 37), on a CPU: the accelerator is stood in for by a sleep per step (``--step-ms``), which
like a GPU's asynchronous work leaves the host's cores to the loader.

For each round, a fresh ``Loader.batches(best fit, segments)`` over the corpus feeds
``--steps`` steps after ``--warmup``: ``plain`` asks for each batch when the step before it has
ended; ``ahead`` takes them from ``openwebtext.ahead(batches, depth=2)``, started before the
warm-up. Reported per feed (median over rounds, rounds alternating the order): the wall time per
step and the share of it spent in ``next()``. One JSON line.

    python benchmarks/bench_ahead.py [CORPUS ...] [--step-ms 50] [--steps 100] [--rounds 3]

With no CORPUS, the corpus of ``bench_gpu_feed.py`` (generated once into the cache folder).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench_gpu_feed import generated_corpus

from openwebtext import Loader, ahead


def run(args: argparse.Namespace, made_ahead: bool) -> dict[str, float]:
    loader = Loader(args.corpus, tokenizer=args.tokenizer, workers=args.workers, seed=0,
                    epochs=None)  # fmt: skip
    batches: Any = loader.batches(args.seq_len, args.batch_size, packing="bestfit", segments=True)
    if made_ahead:
        batches = ahead(batches, depth=2).start()
    waited = 0.0
    with batches:
        for _ in range(args.warmup):
            next(batches)
            time.sleep(args.step_ms / 1000)
        start = time.perf_counter()
        for _ in range(args.steps):
            before = time.perf_counter()
            next(batches)
            waited += time.perf_counter() - before
            time.sleep(args.step_ms / 1000)
        seconds = time.perf_counter() - start
    return {"step_ms": 1000 * seconds / args.steps, "wait_share": waited / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("corpus", nargs="*")
    add("--step-ms", type=float, default=50.0, help="the stand-in accelerator's time per step")
    add("--steps", type=int, default=100)
    add("--warmup", type=int, default=10)
    add("--rounds", type=int, default=3)
    add("--seq-len", type=int, default=1024)
    add("--batch-size", type=int, default=16)
    add("--tokenizer", default="gpt2")
    add("--workers", type=int, default=2)
    args = parser.parse_args()
    args.corpus = args.corpus or generated_corpus()
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "ahead": []}
    for r in range(args.rounds):
        order = ["plain", "ahead"] if r % 2 == 0 else ["ahead", "plain"]
        for name in order:
            runs[name].append(run(args, name == "ahead"))
    report: dict[str, Any] = {"step_ms_target": args.step_ms, "steps": args.steps}
    for name, results in runs.items():
        report[name] = {k: statistics.median(r[k] for r in results) for k in results[0]}
        report[name]["rounds"] = results
    report["ahead_over_plain_step"] = report["ahead"]["step_ms"] / report["plain"]["step_ms"]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
