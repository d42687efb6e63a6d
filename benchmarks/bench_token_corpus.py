"""``Loader.batches`` over a token corpus against ``np.memmap`` slicing of the same file.

Usage: python benchmarks/bench_token_corpus.py [TRAIN_BIN] [--tokens 50_000_000]
    [--seq-len 1024] [--batch-size 8] [--rounds 3] [--workers 0 2]

Without a file, writes one: ``--tokens`` GPT-2-sized ids (uint16) in documents of a
log-normal length (median ~700, mean ~1,100 ids, as OpenWebText's), each ending with 50256,
plus its Megatron ``.idx``. Times, per round, whole passes over the file (tokens/s of
batches of ``batch_size x (seq_len + 1)`` int64 ids handed to the caller):

- memmap, sequential: nanoGPT-style rows cut from ``np.memmap`` in file order (``astype``
  int64), the floor of any loader of this file;
- memmap, random: nanoGPT's ``get_batch`` (random offsets, rows stacked);
- ``Loader.batches`` concat, and best fit with segments, ``workers`` 0 and 2: seeded
  shuffle, exact resume and shares included.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

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


def timed(run: Callable[[], int], rounds: int) -> tuple[float, int]:
    """The median seconds of ``rounds`` runs (after one warm-up) and the tokens of one."""
    tokens = run()
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train_bin", nargs="?", type=Path)
    parser.add_argument("--tokens", type=int, default=50_000_000)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.train_bin or write_tokens(Path(tmp), args.tokens)
        size = path.stat().st_size
        print(f"{path}: {size // 2:,} ids, seq_len {args.seq_len}, batch {args.batch_size}")
        s, b = args.seq_len, args.batch_size
        cases: list[tuple[str, Callable[[], int]]] = [
            ("memmap, sequential", lambda: memmap_sequential(path, s, b)),
            ("memmap, random (nanoGPT)", lambda: memmap_random(path, s, b)),
        ]
        for workers in args.workers:
            for packing in ("concat", "bestfit"):
                name = f"Loader.batches {packing}{' +segments' if packing == 'bestfit' else ''}"
                case = functools.partial(loader_batches, path, s, b, workers, packing)
                cases.append((f"{name}, workers={workers}", case))
        floor = None
        print("| case | s | M tokens/s | ÷ memmap sequential |\n|---|---|---|---|")
        for name, run in cases:
            seconds, tokens = timed(run, args.rounds)
            rate = tokens / seconds
            floor = floor or seconds
            print(f"| {name} | {seconds:.2f} | {rate / 1e6:.1f} | {seconds / floor:.2f} |",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
