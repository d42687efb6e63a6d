"""Packing benchmark (issue 21): concat vs best fit, with and without segments.

Two measurements, for each seq_len (1024, 2048) and packing:

- **cost** (packing alone): one child reads the corpus's GPT-2 token documents once into
  memory (the runs ``DocumentIterator.next_run`` hands out, with their marks), then packs
  them through ``Batches`` / ``BestFitBatches`` over a stand-in for the document iterator that
  hands out the held runs (``MemoryRuns``): no worker, no reading, no tokenizing.
  The consumer's CPU time (``time.process_time``) of a whole epoch of batches is taken for
  every packing in turn, ``--cost-rounds`` rounds, the order rotated each round. Reported per
  batch (median and range over rounds) and as a ratio to plain concat in the same round. The
  same child counts, untimed, the share of documents cut (a document whose ids lie in more
  than one row) and of padding ids of the segments runs; with ``--sha256`` it also hashes
  every batch of every packing (to check a change to packing keeps its output).
- **end to end**: one fresh child per run reads ``--epochs`` epochs of batches
  (``Loader.batches`` from the text corpus, tokenized on the way, set-up included;
  ``--workers`` worker processes, or several counts: ``--workers 0,2``) and reports batches/s;
  ``--rounds`` rounds, every packing and worker count once per round (order rotated); each
  run's wall time is divided by plain concat's of the same round and worker count (median
  and range of the ratios: best fit's "time x concat", at most 1.1 asked by issue 37).

- **warm-up** (with the cost, packing alone): best fit with segments over the first
  ``--warmup-batches`` batches (300) under a ``seq_len`` warm-up from 64 to each seq_len that
  changes every 2 batches (``Schedule.warmup(..., stages=batches // 2)``, ``batch_size`` rows
  of seq_len ids a batch): at every change the rows of the window not handed out are packed
  again, pieces of its documents cut at 64 ids staying cut, so the cost grows with the window.
  Reported per batch and as a ratio to the same batches at the fixed seq_len (same round).

The cost per batch is also given as a share of the end-to-end wall time per batch: how much
of the consumer's time, on a machine whose cores the workers share, goes to packing.

    python benchmarks/bench_packing.py [CORPUS ...] [--workers 2|0,2] [--window 4096]
        [--rounds 3] [--epochs 1] [--cost-rounds 5] [--warmup-batches 300]
        [--only cost|e2e] [--sha256] [--json out]

With no CORPUS, a small generated corpus (``openwebtext.synth``: 1 subset x 8 members x 200
documents) is written once into the cache folder; ``--bench-corpus`` reads the built-in bench
corpus (``openwebtext.synth.bench_corpus()``: 70,200 documents, ~120 M ids) instead.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import common
import numpy as np

from openwebtext import Loader, Schedule
from openwebtext.stream.batches import Batches
from openwebtext.stream.packing import BestFitBatches
from openwebtext.stream.schema import DocumentState
from openwebtext.stream.source import TokenRun
from openwebtext.stream.state import Mark, Stats

RUNS = (("concat", False), ("concat", True), ("bestfit", False), ("bestfit", True))
EOT = 50256  # GPT-2's end-of-text id


def run_name(packing: str, segments: bool) -> str:
    return f"{packing}{'+seg' if segments else ''}"


def rotated(runs: list[Any], round_number: int) -> list[Any]:
    """``runs`` starting at a different one each round (no run always first or last)."""
    k = round_number % len(runs)
    return runs[k:] + runs[:k]


class MemoryRuns:
    """A ``stream.DocumentSource`` over runs of documents held in memory: what ``Batches``
    and ``BestFitBatches`` call on their document iterator, at the cost of a list index
    (``state`` is not needed here)."""

    def __init__(self, runs: tuple[list[TokenRun], list[TokenRun]], mark: Mark) -> None:
        self._runs, self._at, self._end = runs, 0, mark  # (as the units lie, in order)

    def next_run(self, in_order: bool = False) -> TokenRun:
        at, runs = self._at, self._runs[in_order]
        if at == len(runs):
            raise StopIteration
        self._at = at + 1
        return runs[at]

    def mark(self) -> Mark:
        runs = self._runs[0]
        return runs[self._at].before if self._at < len(runs) else self._end

    def state(self, mark: Mark | None = None) -> DocumentState:
        raise NotImplementedError("the cost mode takes no state")

    def windows_ahead(self) -> list[tuple[int, int, int]]:
        return []  # not a resharded epoch

    @property
    def stats(self) -> Stats:
        return Stats()

    def close(self) -> None:
        pass


def packer(
    documents: MemoryRuns, tokenizer: Any, seq_len: int, args: argparse.Namespace,
    packing: str, segments: bool,
) -> Batches | BestFitBatches:  # fmt: skip
    """What ``Loader.batches`` makes (seed 0, int64, pad_id the end-of-text id)."""
    if packing == "bestfit":
        return BestFitBatches(
            documents, seq_len, args.batch_size, seed=0, pad_id=tokenizer.eot,
            segments=segments, window=args.window,
        )  # fmt: skip
    return Batches(documents, tokenizer, seq_len, args.batch_size, segments=segments)


class Shares:
    """The share of documents cut and of padding ids, counted over segments batches."""

    def __init__(self) -> None:
        self.cut = self.starts = self.padding = self.ids = 0

    def add(self, batch: Any) -> None:
        tokens, segments, positions = batch[:3]
        self.padding += int((segments == 0).sum())
        self.ids += segments.size
        for row, seg, pos in zip(tokens, segments, positions, strict=True):
            # A document starts where its position is 0; it is whole in the row if its last
            # id there is an end-of-text: each cut document has one start not whole.
            real = seg > 0
            first = np.flatnonzero(np.diff(seg, prepend=-1) != 0)
            last = np.append(first[1:], len(seg)) - 1
            begins = (pos[first] == 0) & real[first]
            self.starts += int(begins.sum())
            self.cut += int((begins & (row[last] != EOT)).sum())

    def report(self) -> dict[str, float]:
        return {
            "cut_share": self.cut / max(1, self.starts),
            "padding_share": self.padding / max(1, self.ids),
        }


def cost_child(args: argparse.Namespace) -> None:
    """Read the documents once, then time every packing's consumer CPU; one line of JSON."""
    start = time.perf_counter()
    workers = int(args.workers.split(",")[-1])
    loader = Loader(args.corpus, tokenizer="gpt2", workers=workers, seed=0)
    laid: tuple[list[TokenRun], list[TokenRun]] = ([], [])
    for in_order, runs in enumerate(laid):
        with loader.iter() as stream:
            tokenizer = stream.tokenizer
            while True:
                try:
                    runs.append(stream.next_run(in_order=bool(in_order)))
                except StopIteration:
                    break
            end = stream.mark()
    runs = laid[0]
    report: dict[str, Any] = {
        "documents": sum(len(run) for run in runs),
        "ids": sum(len(run.ids) for run in runs),
        "read_s": time.perf_counter() - start,
        "runs": {},
    }
    seq_lens = list(map(int, args.seq_lens.split(",")))
    configs = [(s, p, g) for s in seq_lens for p, g in RUNS]
    for seq_len, packing, segments in configs:  # untimed: batch counts, shares, hashes
        entry = report["runs"].setdefault(str(seq_len), {})[run_name(packing, segments)] = {}
        shares, digest, count = Shares(), hashlib.sha256(), 0
        for batch in packer(MemoryRuns(laid, end), tokenizer, seq_len, args,
                            packing, segments):  # fmt: skip
            count += 1
            if segments:
                shares.add(batch)
            if args.sha256:
                for array in batch if segments else (batch,):
                    if array is not None:  # (a corpus's sources: None, whose bytes are an address)
                        digest.update(np.ascontiguousarray(array).tobytes())
        entry.update(batches=count, cpu_s=[])
        if segments:
            entry.update(shares.report())
        if args.sha256:
            entry["sha256"] = digest.hexdigest()
    for round_number in range(args.cost_rounds):
        for seq_len, packing, segments in rotated(configs, round_number):
            packed = packer(MemoryRuns(laid, end), tokenizer, seq_len, args,
                            packing, segments)  # fmt: skip
            gc.collect()
            began = time.process_time()
            for _ in packed:
                pass
            spent = time.process_time() - began
            report["runs"][str(seq_len)][run_name(packing, segments)]["cpu_s"].append(spent)
    if args.warmup_batches:
        report["warmup"] = {str(s): warmup_cost(laid, end, tokenizer, s, args) for s in seq_lens}
    print(json.dumps(report))


def warmup_cost(
    laid: tuple[list[TokenRun], list[TokenRun]], end: Mark, tokenizer: Any, seq_len: int,
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """Best fit's consumer CPU per batch (segments) over the first ``--warmup-batches``
    batches, under a warm-up from 64 to ``seq_len`` that changes every 2 batches and at the
    fixed ``seq_len``, ``--cost-rounds`` rounds (the order rotated)."""
    count = args.warmup_batches
    tokens = seq_len * args.batch_size
    schedules = [
        ("fixed", Schedule([(0, seq_len, args.batch_size)])),
        ("warmup", Schedule.warmup(64, seq_len, tokens=tokens, batches=count,
                                   stages=max(2, count // 2), multiple=1)),
    ]  # fmt: skip
    out: dict[str, Any] = {"fixed": [], "warmup": [], "batches": {}}
    for round_number in range(args.cost_rounds):
        for name, schedule in rotated(schedules, round_number):
            packed = BestFitBatches(
                MemoryRuns(laid, end), schedule=schedule, seed=0, pad_id=tokenizer.eot,
                segments=True, window=args.window,
            )  # fmt: skip
            gc.collect()
            began = time.process_time()
            made = sum(1 for _ in itertools.islice(packed, count))
            out[name].append((time.process_time() - began) / max(made, 1))
            out["batches"][name] = made
    return out


def child(args: argparse.Namespace) -> None:
    """Read ``--epochs`` epochs of batches end to end (the loader's set-up included); print
    one line of JSON."""
    start = time.perf_counter()
    cpu = time.process_time()
    loader = Loader(args.corpus, tokenizer="gpt2", workers=int(args.workers), seed=0,
                    epochs=args.epochs)  # fmt: skip
    batches = 0
    with loader.batches(
        args.seq_len, args.batch_size, segments=args.segments, packing=args.packing,
        window=args.window,
    ) as packed:  # fmt: skip
        for _ in packed:
            batches += 1
    seconds = time.perf_counter() - start
    report: dict[str, Any] = {"batches": batches, "seconds": seconds}
    report["consumer_cpu_s"] = time.process_time() - cpu
    report["batches_per_s"] = batches / seconds
    print(json.dumps(report))


def corpus_paths(args: argparse.Namespace) -> list[str]:
    if args.corpus:
        return list(args.corpus)
    from openwebtext.files import cache_root
    from openwebtext.synth import COMPLETE_MARKER, bench_corpus, corpus_dirname, write_corpus

    if args.bench_corpus:
        return [str(bench_corpus())]
    path = cache_root() / corpus_dirname(1, 8, 200, 0)
    if not (path / COMPLETE_MARKER).is_file():
        print(f"generating a small corpus in {path} ...", file=sys.stderr, flush=True)
        write_corpus(path, subsets=1, members=8, docs=200, seed=0)
    return [str(path)]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def measure_cost(paths: list[str], args: argparse.Namespace) -> dict[str, Any]:
    common_args = ["--workers", str(args.workers), "--batch-size", str(args.batch_size),
                   "--window", str(args.window), "--seq-lens", args.seq_lens,
                   "--cost-rounds", str(args.cost_rounds),
                   "--warmup-batches", str(args.warmup_batches)]  # fmt: skip
    report = common.run_child(
        __file__, "cost", [*paths, *common_args, *(["--sha256"] if args.sha256 else [])]
    )
    print(
        f"cost: {report['documents']:,} documents, {report['ids']:,} ids read into memory in "
        f"{report['read_s']:.1f} s; consumer CPU per batch over {args.cost_rounds} rounds, "
        "median (min-max):",
        flush=True,
    )
    for seq_len, runs in report["runs"].items():
        concat = runs["concat"]
        for name, run in runs.items():
            per_batch = [s / run["batches"] * 1e6 for s in run["cpu_s"]]
            ratios = [
                (s / run["batches"]) / (c / concat["batches"])
                for s, c in zip(run["cpu_s"], concat["cpu_s"], strict=True)
            ]
            run["us_per_batch"], run["ratio_to_concat"] = per_batch, ratios
            shares = ""
            if "cut_share" in run:
                shares = f", cut {run['cut_share']:.1%}, padding {run['padding_share']:.2%}"
            sha = f", sha256 {run['sha256'][:16]}" if "sha256" in run else ""
            print(
                f"  seq_len {seq_len} {name:12s} {statistics.median(per_batch):7.1f} us/batch "
                f"({min(per_batch):.1f}-{max(per_batch):.1f}), x concat {spread(ratios)}, "
                f"{run['batches']} batches{shares}{sha}",
                flush=True,
            )
    for seq_len, warm in report.get("warmup", {}).items():
        fixed, warmup = ([s * 1e6 for s in warm[name]] for name in ("fixed", "warmup"))
        ratios = [w / f for w, f in zip(warmup, fixed, strict=True)]
        print(
            f"  warm-up 64-{seq_len}, a change every 2 batches (window {args.window}), "
            f"bestfit+seg: {statistics.median(warmup):9.1f} us/batch "
            f"({min(warmup):.1f}-{max(warmup):.1f}) over {warm['batches']['warmup']} batches; "
            f"fixed seq_len {statistics.median(fixed):.1f} us/batch; x fixed {spread(ratios)}",
            flush=True,
        )
    return report


def measure_end_to_end(paths: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    workers = [int(w) for w in args.workers.split(",")]
    configs = [(w, int(s), p, g) for w in workers for s in args.seq_lens.split(",")
               for p, g in RUNS]  # fmt: skip
    results: list[dict[str, Any]] = []
    load = common.OtherLoad()
    for round_number in range(args.rounds):
        for count, seq_len, packing, segments in rotated(configs, round_number):
            report = common.run_child(
                __file__,
                "batches",
                [*paths, "--workers", str(count), "--batch-size", str(args.batch_size),
                 "--window", str(args.window), "--seq-len", str(seq_len),
                 "--packing", packing, "--segments", str(int(segments)),
                 "--epochs", str(args.epochs)],
            )  # fmt: skip
            report.update(round=round_number, seq_len=seq_len, packing=packing, workers=count)
            report["segments"] = segments
            results.append(report)
            print(
                f"round {round_number} workers {count} seq_len {seq_len} {packing:8s} "
                f"segments={segments!s:5s} {report['batches_per_s']:8.2f} batches/s "
                f"({report['batches']} batches, {report['seconds']:.1f} s, consumer CPU "
                f"{report['consumer_cpu_s']:.1f} s)",
                flush=True,
            )
    seconds, other, stolen = load.measure()
    print(
        f"end to end: {args.rounds} rounds in {seconds:.0f} s; other processes kept "
        f"{other:.2f} cores busy, the hypervisor stole {stolen:.2f}; load average now "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    keys = [(r["round"], r["workers"], r["seq_len"], run_name(r["packing"], r["segments"]))
            for r in results]  # fmt: skip
    per_batch = {k: r["seconds"] / r["batches"] for k, r in zip(keys, results, strict=True)}
    cpu_per_batch = {k: r["cpu_s"] / r["batches"] for k, r in zip(keys, results, strict=True)}
    for count, seq_len, packing, segments in configs:
        name = run_name(packing, segments)
        ratios = [
            per_batch[(k, count, seq_len, name)] / per_batch[(k, count, seq_len, "concat")]
            for k in range(args.rounds)
        ]
        rates = [1 / per_batch[(k, count, seq_len, name)] for k in range(args.rounds)]
        # The CPU of the run's processes (the child and its workers) per batch, over concat's:
        # less moved than the wall time by what else runs on the machine.
        cpus = [
            cpu_per_batch[(k, count, seq_len, name)] / cpu_per_batch[(k, count, seq_len, "concat")]
            for k in range(args.rounds)
        ]
        print(
            f"  workers {count} seq_len {seq_len} {name:12s} {statistics.median(rates):8.1f} "
            f"batches/s ({min(rates):.1f}-{max(rates):.1f}), time x concat {spread(ratios)}, "
            f"CPU x concat {spread(cpus)}",
            flush=True,
        )
    return results


def shares_of_end_to_end(cost: dict[str, Any], e2e: list[dict[str, Any]]) -> None:
    """The consumer's packing CPU per batch over the end-to-end wall time per batch, and
    (when the runs report it) over the CPU time per batch of the child and its workers."""
    print("packing cost as a share of the end-to-end time per batch (medians):", flush=True)
    most = max(r["workers"] for r in e2e)  # the runs of the most workers
    for seq_len, runs in cost["runs"].items():
        concat_us = statistics.median(runs["concat"]["us_per_batch"])
        for name, run in runs.items():
            same = [r for r in e2e
                    if str(r["seq_len"]) == seq_len and r["workers"] == most
                    and run_name(r["packing"], r["segments"]) == name]  # fmt: skip
            wall = statistics.median(r["seconds"] / r["batches"] * 1e6 for r in same)
            us = statistics.median(run["us_per_batch"])
            run["e2e_us_per_batch"] = wall
            budget = ""
            if all("cpu_s" in r for r in same):  # every process's CPU: the cores' budget
                cpu = statistics.median(r["cpu_s"] / r["batches"] * 1e6 for r in same)
                run["e2e_cpu_us_per_batch"] = cpu
                budget = (
                    f"; of {cpu:7.1f} us of CPU (all processes) per batch: {us / cpu:.1%}, "
                    f"over concat {(us - concat_us) / cpu:+.1%}"
                )
            print(
                f"  seq_len {seq_len} {name:12s} packing {us:6.1f} us of {wall:7.1f} us wall "
                f"({us / wall:.1%}); over concat's packing {us - concat_us:+6.1f} us "
                f"({(us - concat_us) / wall:+.1%}){budget}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="*")
    parser.add_argument("--bench-corpus", action="store_true")
    parser.add_argument("--workers", default="2", help="end to end: a count, or several: 0,2")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--seq-lens", default="1024,2048")
    parser.add_argument("--rounds", type=int, default=3, help="end-to-end rounds")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per end-to-end run")
    parser.add_argument("--cost-rounds", type=int, default=5)
    parser.add_argument("--warmup-batches", type=int, default=300,
                        help="batches of the warm-up cost (0: none)")  # fmt: skip
    parser.add_argument("--only", choices=("cost", "e2e"))
    parser.add_argument("--sha256", action="store_true", help="hash every packed batch")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seq-len", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--packing", help=argparse.SUPPRESS)
    parser.add_argument("--segments", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "cost":
        cost_child(args)
        return
    if args.child:
        child(args)
        return
    paths = corpus_paths(args)
    common.warm_page_cache(paths)
    results: dict[str, Any] = {"corpus": paths, "cpu": common.cpu_model()}
    if args.only != "e2e":
        results["cost"] = measure_cost(paths, args)
    if args.only != "cost":
        results["end_to_end"] = measure_end_to_end(paths, args)
    if args.only is None:
        shares_of_end_to_end(results["cost"], results["end_to_end"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
