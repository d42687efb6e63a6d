"""``Loader.batches`` over a token corpus against ``np.memmap`` slicing of the same file.

Usage: python benchmarks/bench_token_corpus.py [TRAIN_BIN] [--tokens 50_000_000]
    [--seq-len 1024] [--batch-size 8] [--rounds 5] [--workers 0 2] [--json]

Without a file, writes one: ``--tokens`` GPT-2-sized ids (uint16) in documents of a
log-normal length (median ~700, mean ~1,100 ids, as OpenWebText's), each ending with 50256,
plus its Megatron ``.idx``. Times whole passes over the file (the loader's set-up included)
handing int64 batches of ``batch_size x (seq_len + 1)`` ids to the caller:

- memmap rows (the floor, issue 37): rows cut from ``np.memmap`` in file order, each converted
  to int64 on its own (``np.asarray(ids[i*L : i*L+L+1], dtype=np.int64)``);
- memmap batches: the same rows a batch at a time (``sliding_window_view``, ``astype``);
- memmap, random: nanoGPT's ``get_batch`` (random offsets, rows stacked);
- ``Loader.batches`` concat, and best fit with segments, ``workers`` 0 and 2: seeded
  shuffle, exact resume and shares included.

Rounds alternate the cases (the order rotated each round); each case's time is divided by the
floor's of the same round, and the median of those ratios is printed, of wall time and of the
process's CPU time (steadier on a shared machine).

To compare versions of the library in one run: ``--versions before=/old/src after=src
--alternations 4`` runs this script (on the same file) as a child with ``PYTHONPATH`` at each
version's ``src`` in turn, ``--alternations`` times each, the order swapped every time, and
prints each version's median ratios over all its rounds.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from openwebtext import Corpus, Loader
from openwebtext.tokenfiles import megatron_index

EOT = 50256


def write_tokens(folder: Path, tokens: int, seed: int = 0) -> Path:
    """A synthetic ``train.bin`` (+ ``train.idx``) of about ``tokens`` ids."""
    rng = np.random.default_rng(seed)
    lengths = np.maximum(rng.lognormal(6.55, 0.9, size=tokens // 500), 1).astype(np.int64)
    ends = np.cumsum(lengths)
    ends = ends[: int(np.searchsorted(ends, tokens)) + 1]
    ids = rng.integers(0, EOT, size=int(ends[-1]), dtype=np.uint16)
    ids[ends - 1] = EOT
    path = folder / "train.bin"
    ids.tofile(path)
    (folder / "train.idx").write_bytes(megatron_index(ends, ids.dtype))
    return path


def memmap_rows(path: Path, seq_len: int, batch: int) -> int:
    """The floor: rows cut from the memory map in file order, converted one by one."""
    ids = np.memmap(path, dtype=np.uint16, mode="r")
    tokens = 0
    for i in range((len(ids) - 1) // seq_len):
        tokens += np.asarray(ids[i * seq_len : i * seq_len + seq_len + 1], dtype=np.int64).size
    return tokens


def memmap_sequential(path: Path, seq_len: int, batch: int) -> int:
    data = np.memmap(path, dtype=np.uint16, mode="r")
    step = seq_len * batch
    tokens = 0
    for start in range(0, len(data) - step - 1, step):
        rows = np.lib.stride_tricks.sliding_window_view(
            data[start : start + step + 1], seq_len + 1
        )[::seq_len]
        out = rows.astype(np.int64)
        tokens += out.size
    return tokens


def memmap_random(path: Path, seq_len: int, batch: int) -> int:
    data = np.memmap(path, dtype=np.uint16, mode="r")
    rng = np.random.default_rng(0)
    tokens = 0
    for _ in range(len(data) // (seq_len * batch)):
        ix = rng.integers(0, len(data) - seq_len - 1, size=batch)
        out = np.stack([data[i : i + seq_len + 1].astype(np.int64) for i in ix])
        tokens += out.size
    return tokens


def loader_batches(path: Path, seq_len: int, batch: int, workers: int, packing: str) -> int:
    corpus = Corpus.open_tokens(path)
    loader = Loader(corpus, tokenizer="gpt2", workers=workers, seed=0)
    segments = packing == "bestfit"
    tokens = 0
    with loader.batches(seq_len, batch, packing=packing, segments=segments) as batches:
        for item in batches:
            tokens += (item.tokens if segments else item).size
    return tokens


def rounds(cases: list[tuple[str, Callable[[], int]]], count: int) -> dict[str, dict[str, Any]]:
    """Each case once per round (after one warm-up each), the order rotated; per case the
    median wall and CPU seconds, its ids, and the medians of its ratios to the first case
    (the floor) of the same round."""
    runs: dict[str, dict[str, Any]] = {
        name: {"ids": run(), "wall": [], "cpu": []} for name, run in cases
    }
    for r in range(count):
        for name, run in cases[r % len(cases) :] + cases[: r % len(cases)]:
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            runs[name]["wall"].append(time.perf_counter() - wall)
            runs[name]["cpu"].append(time.process_time() - cpu)
    floor = {kind: list(runs[cases[0][0]][kind]) for kind in ("wall", "cpu")}
    for entry in runs.values():
        for kind in ("wall", "cpu"):
            ratios = [a / b for a, b in zip(entry[kind], floor[kind], strict=True)]
            entry[f"{kind}_ratios"] = ratios
            entry[f"{kind}_ratio"] = statistics.median(ratios)
            entry[kind] = statistics.median(entry[kind])
    return runs


def compare(path: Path, args: argparse.Namespace) -> None:
    """Each version's run as a child, alternated; the median of its rounds' ratios."""
    versions = dict(v.split("=", 1) for v in args.versions)
    ratios: dict[str, dict[str, dict[str, list[float]]]] = {name: {} for name in versions}
    argv = [sys.argv[0], str(path), "--seq-len", str(args.seq_len), "--batch-size",
            str(args.batch_size), "--rounds", str(args.rounds), "--workers",
            *map(str, args.workers), "--json"]  # fmt: skip
    names = list(versions)
    for k in range(args.alternations):
        for name in names if k % 2 == 0 else names[::-1]:
            env = {**os.environ, "PYTHONPATH": str(Path(versions[name]).resolve())}
            out = subprocess.run([sys.executable, *argv], env=env, capture_output=True,
                                 text=True, check=True).stdout  # fmt: skip
            for case, entry in json.loads(out.splitlines()[-1]).items():
                into = ratios[name].setdefault(case, {"wall": [], "cpu": []})
                into["wall"] += entry["wall_ratios"]
                into["cpu"] += entry["cpu_ratios"]
    print(
        f"{path}: medians of {args.alternations} x {args.rounds} rounds per version, "
        "each a ratio to the floor of its round"
    )
    print("| case | " + " | ".join(f"{n}: wall ÷ floor | {n}: CPU ÷ floor" for n in names) + " |")
    print("|---|" + "---|---|" * len(names))
    for case in ratios[names[0]]:
        cells = []
        for name in names:
            got = ratios[name].get(case)
            cells += ["", ""] if got is None else [
                f"{statistics.median(got['wall']):.2f}", f"{statistics.median(got['cpu']):.2f}"
            ]  # fmt: skip
        print(f"| {case} | " + " | ".join(cells) + " |")
    if args.json:
        print(json.dumps(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train_bin", nargs="?", type=Path)
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--json", action="store_true", help="also print one line of JSON")
    parser.add_argument(
        "--versions",
        nargs="+",
        metavar="NAME=SRC",
        help="compare these versions of the library (a src folder each)",
    )
    parser.add_argument("--alternations", type=int, default=4)  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.train_bin or write_tokens(Path(tmp), args.tokens)
        if args.versions:
            compare(path, args)
            return
        size = path.stat().st_size
        print(f"{path}: {size // 2:,} ids, seq_len {args.seq_len}, batch {args.batch_size}")
        s, b = args.seq_len, args.batch_size
        cases: list[tuple[str, Callable[[], int]]] = [
            ("memmap rows, int64 one by one (the floor)", lambda: memmap_rows(path, s, b)),
            ("memmap batches (sliding_window_view)", lambda: memmap_sequential(path, s, b)),
            ("memmap, random (nanoGPT)", lambda: memmap_random(path, s, b)),
        ]
        for workers in args.workers:
            for packing in ("concat", "bestfit"):
                name = f"Loader.batches {packing}{' +segments' if packing == 'bestfit' else ''}"
                case = functools.partial(loader_batches, path, s, b, workers, packing)
                cases.append((f"{name}, workers={workers}", case))
        runs = rounds(cases, args.rounds)
        print("| case | wall s | CPU s | M ids/s (wall) | wall ÷ floor | CPU ÷ floor |")
        print("|---|---|---|---|---|---|")
        for name, entry in runs.items():
            rate = entry["ids"] / entry["wall"] / 1e6
            print(f"| {name} | {entry['wall']:.3f} | {entry['cpu']:.3f} | {rate:.1f} | "
                  f"{entry['wall_ratio']:.2f} | {entry['cpu_ratio']:.2f} |")  # fmt: skip
        if args.json:
            print(json.dumps(runs))


if __name__ == "__main__":
    main()
