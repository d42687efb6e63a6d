"""Ray's overhead against the local engine on this machine (``owt tokenize``, 2 cores).

Usage: python benchmarks/bench_ray.py [PATHS...] [--cpus 2] [--units-per-task 16]
No path means the built-in generated corpus. Each kind runs once, in a fresh child process
(this script with ``--child KIND``), after the page cache is warmed; the files of every kind
are compared byte for byte.

- local: ``prepare(corpus, out, PrepareOptions(workers=CPUS))`` (``owt tokenize -j CPUS``
  without the CLI).
- ray: ``openwebtext.ray.tokenize`` on a private local instance of CPUS CPUs, timed in parts:
  ``ray.init`` (start-up), the tasks (each ``prepare`` of a slice of ``--units-per-task``
  units with no pool of its own), the merge, and ``ray.shutdown``. In the same instance,
  before the run: the cost of a task that does nothing, 400 of them in flight at once
  (throughput) and 50 one after the other (latency).
- ray-1: the same with one unit per task (per-task costs over many more, smaller tasks).
- read: ``read_openwebtext(paths).iter_batches`` counting documents, against the local
  ``Loader(paths, workers=CPUS, shuffle=False)`` (``read-local``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import OtherLoad, cpu_model, run_child, warm_page_cache

from openwebtext import Corpus, Loader
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.synth import paths_or_default


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for name in ("train.bin", "val.bin"):
        h.update((folder / name).read_bytes())
    return h.hexdigest()[:16]


def _tokens(meta: dict[str, Any]) -> int:
    return int(sum(meta["counts"]["tokens"].values()))


def _child_local(paths: list[str], out: Path, cpus: int) -> dict[str, Any]:
    corpus = Corpus.open(paths)
    start = time.perf_counter()
    report = prepare(corpus, out, PrepareOptions(workers=cpus))
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": _tokens(report.meta), "digest": _digest(out)}


def _child_ray(paths: list[str], out: Path, cpus: int, units_per_task: int) -> dict[str, Any]:
    import ray

    from openwebtext import ray as owt_ray

    corpus = Corpus.open(paths)
    result: dict[str, Any] = {}
    start = time.perf_counter()
    with owt_ray.local_ray(num_cpus=cpus):
        result["init"] = time.perf_counter() - start

        @ray.remote(num_cpus=1)
        def noop() -> int:
            return 0

        ray.get([noop.remote() for _ in range(20)])  # start the workers once
        began = time.perf_counter()
        ray.get([noop.remote() for _ in range(400)])
        result["task_throughput_us"] = (time.perf_counter() - began) / 400 * 1e6
        began = time.perf_counter()
        for _ in range(50):
            ray.get(noop.remote())
        result["task_latency_ms"] = (time.perf_counter() - began) / 50 * 1e3
        phases: dict[str, float] = {}
        began = time.perf_counter()

        def progress(event: Any) -> None:
            if event.phase != "tokenize" and "tasks" not in phases:
                phases["tasks"] = time.perf_counter() - began

        report = owt_ray.tokenize(
            corpus, out, PrepareOptions(workers=cpus), units_per_task=units_per_task,
            progress=progress,
        )  # fmt: skip
        work = time.perf_counter() - began
        result["tasks"] = phases.get("tasks", work)
        result["merge"] = work - result["tasks"]
        result["work"] = work
        stopping = time.perf_counter()
    result["shutdown"] = time.perf_counter() - stopping
    result["seconds"] = time.perf_counter() - start
    result["slices"] = -(-len(corpus.units) // units_per_task)
    result["tokens"] = _tokens(report.meta)
    result["digest"] = _digest(out)
    return result


def _child_read(paths: list[str], cpus: int) -> dict[str, Any]:
    from openwebtext import ray as owt_ray

    start = time.perf_counter()
    with owt_ray.local_ray(num_cpus=cpus):
        init = time.perf_counter() - start
        began = time.perf_counter()
        documents = 0
        for batch in owt_ray.read_openwebtext(paths).iter_batches(batch_size=4096):
            documents += len(batch["name"])
        seconds = time.perf_counter() - began
    return {"init": init, "seconds": seconds, "documents": documents}


def _child_read_local(paths: list[str], cpus: int) -> dict[str, Any]:
    began = time.perf_counter()
    documents = sum(1 for _ in Loader(paths, workers=cpus, shuffle=False))
    return {"seconds": time.perf_counter() - began, "documents": documents}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--units-per-task", type=int, default=16)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = paths_or_default(args.paths, bench=True)
    if args.child:
        out = Path(args.out or ".")
        if args.child == "local":
            report = _child_local(paths, out, args.cpus)
        elif args.child == "ray":
            report = _child_ray(paths, out, args.cpus, args.units_per_task)
        elif args.child == "read":
            report = _child_read(paths, args.cpus)
        else:
            report = _child_read_local(paths, args.cpus)
        print(json.dumps(report))
        return
    warm_page_cache(paths)
    corpus = Corpus.open(paths)
    print(f"{cpu_model()}; {len(corpus.units)} units, {corpus.compressed_bytes / 1e6:.0f} MB")
    load = OtherLoad()
    results: dict[str, dict[str, Any]] = {}
    temp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        common = [*paths, "--cpus", str(args.cpus)]
        kinds = [
            ("local", ["--out", str(temp / "local")]),
            ("ray", ["--out", str(temp / "ray"), "--units-per-task", str(args.units_per_task)]),
            ("ray-1", ["--out", str(temp / "ray1"), "--units-per-task", "1"]),
            ("read-local", []),
            ("read", []),
        ]
        for kind, extra in kinds:
            child = "ray" if kind == "ray-1" else kind
            results[kind] = run_child(__file__, child, [*common, *extra])
            print(kind, json.dumps(results[kind]), flush=True)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    seconds, other, stolen = load.measure()
    digests = {results[k]["digest"] for k in ("local", "ray", "ray-1")}
    print(f"files identical: {len(digests) == 1}")
    print(f"other processes kept {other:.2f} cores busy, {stolen:.2f} stolen, over {seconds:.0f} s")
    local = results["local"]
    for kind in ("ray", "ray-1"):
        r = results[kind]
        print(
            f"{kind}: start {r['init']:.1f} s, tasks {r['tasks']:.1f} s ({r['slices']} slices), "
            f"merge {r['merge']:.2f} s, stop {r['shutdown']:.1f} s, total {r['seconds']:.1f} s; "
            f"local {local['seconds']:.1f} s; tokenize {r['tokens'] / r['tasks'] / 1e6:.2f} M "
            f"tokens/s vs local {local['tokens'] / local['seconds'] / 1e6:.2f}; empty task "
            f"{r['task_throughput_us']:.0f} us in flight, {r['task_latency_ms']:.2f} ms alone"
        )
    read, read_local = results["read"], results["read-local"]
    print(
        f"read: ray {read['documents']} documents in {read['seconds']:.1f} s (+ start "
        f"{read['init']:.1f} s), local {read_local['documents']} in {read_local['seconds']:.1f} s"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
