"""Tokenizing in the workers: the loader's token throughput against one process that only
reads and tokenizes, in the same run.

Usage: python benchmarks/bench_tokenize.py [PATHS...] [--repeat 3] [--workers 1,2] [--take 20000]
No path means the built-in generated corpus. The documents are the loader's first ``--take``
(seed 0), rounded UP to the end of their shuffle block (the loader tokenizes whole members and
hands a block out only once all of it is tokenized, so the workers then tokenize the documents
handed out, plus the members in flight when the stream stops, which are killed, and the
reference can process the same members); ``--take 0``: all.
Every measurement runs in a fresh child process (this script with ``--child KIND``, printing
one JSON line), and the rounds are interleaved: every (kind, workers) once (in a rotating
order), then all of them again, ``--repeat`` times.

- reference: ONE process doing what a worker must do at minimum, for the same members in the
  loader's order: ``openwebtext.engine.read.Reader(...).read(unit)`` (pread, decompress, tar walk,
  UTF-8 check), then per document ``tokenizer.encode(bytes.decode("utf-8"))``. Timed after
  ``load_tokenizer("gpt2")`` (its load time is reported apart). The ceiling for W workers is
  ``min(W, usable cores) x`` its rate.
- loader-tokens W: ``Loader(corpus, workers=W, seed=0, tokenizer="gpt2", take=N)``, the loop
  reading ``len(doc.tokens)``. Wall from ``.iter()`` to the end (start-up included: the
  consumer loads the tokenizer once before the workers fork, and the first block must be
  tokenized whole before its first document). Consumer CPU (``time.process_time()``) from
  after the FIRST document is received, per later document: the start-up is left out.
- loader-batches W: the same loader's ``.batches(1024, 8)`` consumed fully; wall tokens/s
  counts the ids the batches add (``8 x 1024`` each); consumer CPU from after the first batch,
  per later id and per document read after it.

Worker CPU per document: the reference's own CPU; for the loaders, the CPU of the workers
(``RUSAGE_CHILDREN`` of the child once they are joined) over the documents handed out;
"workers busy" is that CPU ÷ (min(W, cores) x wall).

Read: ``loader ÷ ceiling`` for tokens/s, the median over rounds of the values paired in one
round (the reference of the same round).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from typing import Any

from common import OtherLoad, cpu_model, run_child, warm_page_cache

from openwebtext import Corpus, Loader, Options, Unit
from openwebtext.engine import Reader
from openwebtext.plan import plan
from openwebtext.tokenizer import load_tokenizer

KINDS = ("reference", "loader-tokens", "loader-batches")
SEED = 0
TOKENIZER = "gpt2"
SEQ_LEN, BATCH_SIZE = 1024, 8


def _plan_units(corpus: Corpus, count: int) -> list[Unit]:
    """The first ``count`` units in the loader's order (as ``openwebtext.bench.children``)."""
    order = plan(len(corpus.units), shuffle=True, seed=SEED)
    return [corpus.units[i] for i in order[:count]]


def _reader() -> Reader:
    options = Options()
    return Reader(options.max_member_bytes, options.max_document_bytes)


def _shape(paths: list[str], take: int) -> tuple[int, int, int]:
    """(units, documents, blocks): the loader's first ``take`` documents, to a block's end."""
    corpus = Corpus.open(paths)
    block_size = Options().shuffle_buffer
    reader = _reader()
    units = documents = blocks = in_block = 0
    try:
        for unit in _plan_units(corpus, len(corpus.units)):
            kept = sum(offset >= 0 for offset in reader.read(unit).offsets)
            units += 1
            documents += kept
            in_block += kept
            if in_block >= block_size:
                blocks += 1
                in_block = 0
                if take and documents >= take:
                    break
        else:
            blocks += in_block > 0
    finally:
        reader.close()
    return units, documents, blocks


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended: the loader's workers."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child_reference(paths: list[str], units: int) -> dict[str, Any]:
    members = _plan_units(Corpus.open(paths), units)
    load = time.perf_counter()
    encode = load_tokenizer(TOKENIZER).encode
    load_s = time.perf_counter() - load
    encode("warm up, once")
    reader = _reader()
    clock = time.perf_counter
    documents = tokens = text_bytes = 0
    read_s = 0.0
    wall = clock()
    cpu = time.process_time()
    try:
        for unit in members:
            t0 = clock()
            member = reader.read(unit)
            read_s += clock() - t0
            data = member.data
            for offset, size in zip(member.offsets, member.sizes, strict=True):
                if offset < 0:
                    continue
                tokens += len(encode(data[offset : offset + size].decode("utf-8"))) + 1  # + eot
                documents += 1
                text_bytes += size
    finally:
        reader.close()
    cpu = time.process_time() - cpu
    wall = clock() - wall
    return {
        "documents": documents,
        "tokens": tokens,
        "text_bytes": text_bytes,
        "wall_s": wall,
        "cpu_s": cpu,
        "read_s": read_s,
        "load_s": load_s,
    }


def _child_loader_tokens(paths: list[str], workers: int, take: int) -> dict[str, Any]:
    corpus = Corpus.open(paths)
    loader = Loader(corpus, workers=workers, seed=SEED, tokenizer=TOKENIZER, take=take)
    wall = time.perf_counter()
    with loader.iter() as docs:
        it = iter(docs)
        first_tokens = tokens = len(next(it).tokens)
        first_s = time.perf_counter() - wall
        cpu = time.process_time()
        for d in it:
            tokens += len(d.tokens)
        cpu = time.process_time() - cpu
        stats = docs.stats
    wall = time.perf_counter() - wall
    workers_cpu = _children_cpu()
    if tokens != stats.tokens:
        sys.exit(f"the documents held {tokens} ids, the stats say {stats.tokens}")
    return {
        "documents": stats.documents,
        "tokens": stats.tokens,
        "wall_s": wall,
        "first_s": first_s,
        "cpu_s": cpu,
        "workers_cpu_s": workers_cpu,
        "cpu_documents": stats.documents - 1,
        "cpu_tokens": stats.tokens - first_tokens,
    }


def _child_loader_batches(paths: list[str], workers: int, take: int) -> dict[str, Any]:
    corpus = Corpus.open(paths)
    loader = Loader(corpus, workers=workers, seed=SEED, tokenizer=TOKENIZER, take=take)
    wall = time.perf_counter()
    with loader.batches(SEQ_LEN, BATCH_SIZE) as batches:
        it = iter(batches)
        n = len(next(it))
        first_s = time.perf_counter() - wall
        documents_before = batches.stats.documents
        cpu = time.process_time()
        for b in it:
            n += len(b)
        cpu = time.process_time() - cpu
        stats = batches.stats
    wall = time.perf_counter() - wall
    workers_cpu = _children_cpu()
    count = n // BATCH_SIZE
    return {
        "documents": stats.documents,
        "tokens": stats.tokens,
        "batches": count,
        "batch_tokens": count * SEQ_LEN * BATCH_SIZE,
        "wall_s": wall,
        "first_s": first_s,
        "cpu_s": cpu,
        "workers_cpu_s": workers_cpu,
        "cpu_documents": stats.documents - documents_before,
        "cpu_tokens": (count - 1) * SEQ_LEN * BATCH_SIZE,
    }


def _child(kind: str, paths: list[str], workers: int, units: int, take: int) -> None:
    if kind == "reference":
        report = _child_reference(paths, units)
    elif kind == "loader-tokens":
        report = _child_loader_tokens(paths, workers, take)
    else:
        report = _child_loader_batches(paths, workers, take)
    print(json.dumps(report))










def _median(values: list[float], fmt: str) -> str:
    return format(statistics.median(values), fmt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="worker counts, e.g. 1,2")
    parser.add_argument("--take", type=int, default=20000, help="documents (0: all)")
    parser.add_argument("--units", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.paths, int(args.workers), args.units, args.take)
        return
    if not args.paths:
        from openwebtext.synth import bench_corpus

        args.paths = [str(bench_corpus())]
    worker_counts = [int(w) for w in args.workers.split(",")]
    cores = len(os.sched_getaffinity(0))
    warm_page_cache(args.paths)
    units, take, blocks = _shape(args.paths, args.take)

    jobs = [("reference", 0)] + [(k, w) for w in worker_counts for k in KINDS[1:]]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {job: [] for job in jobs}
    load = OtherLoad()
    for r in range(args.repeat):
        for kind, w in jobs[r % len(jobs) :] + jobs[: r % len(jobs)]:
            child = ["--workers", str(w), "--units", str(units), "--take", str(take)]
            report = run_child(__file__, kind, [*child, *args.paths])
            runs[kind, w].append(report)
            rate = report["tokens"] / report["wall_s"] / 1e6
            what = f"round {r + 1}/{args.repeat} {kind} W={w}"
            print(f"{what}: {rate:.3f} M tokens/s", file=sys.stderr)
    seconds, other, steal = load.measure()

    counts = {(r["documents"], r["tokens"]) for rs in runs.values() for r in rs}
    if len(counts) != 1:
        sys.exit(f"the kinds did not see the same documents and ids: {sorted(counts)}")
    ref = runs["reference", 0]
    documents, tokens = ref[0]["documents"], ref[0]["tokens"]
    text_bytes = ref[0]["text_bytes"]

    print(
        f"CPU: {cpu_model()}; {cores} usable cores; Python {sys.version.split()[0]}; "
        f"tokenizer {TOKENIZER}"
    )
    print(
        f"corpus: {' '.join(args.paths)}: the loader's first {documents:,} documents (seed "
        f"{SEED}; --take {args.take:,} rounded up to the end of shuffle block {blocks}), "
        f"{units} members, {text_bytes / 1e6:.0f} MB of text, {tokens:,} ids with the "
        f"end-of-text ids ({tokens / documents:,.0f} per document)"
    )
    print(
        f"{args.repeat} rounds in {seconds:.0f} s; other processes kept "
        f"{max(other, 0.0):.2f} cores busy meanwhile (steal {steal:.2f} cores)\n"
    )
    print(
        "| kind | workers | docs/s | M tokens/s | ÷ ceiling | worker CPU µs/doc | workers busy "
        "| consumer CPU µs/doc | consumer CPU ns/token | 1st out s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    ref_rates = [r["tokens"] / r["wall_s"] for r in ref]

    def row(kind: str, w: str, rs: list[dict[str, Any]], ratios: list[float] | None) -> None:
        docs_s = _median([r["documents"] / r["wall_s"] for r in rs], ",.0f")
        key = "batch_tokens" if kind == "loader-batches" else "tokens"
        tokens_s = _median([r[key] / r["wall_s"] / 1e6 for r in rs], ".3f")
        ratio = cpu_doc = cpu_token = first = "–"
        if ratios is not None:
            ratio = f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
        cpu_key = "workers_cpu_s" if "workers_cpu_s" in rs[0] else "cpu_s"
        worker_doc = _median([r[cpu_key] / r["documents"] * 1e6 for r in rs], ".0f")
        scale = min(int(w), cores) if w.isdigit() else 1
        busy = _median([r[cpu_key] / r["wall_s"] / scale for r in rs], ".0%")
        if "cpu_documents" in rs[0]:
            cpu_doc = _median([r["cpu_s"] / r["cpu_documents"] * 1e6 for r in rs], ".1f")
            first = _median([r["first_s"] for r in rs], ".2f")
        if "cpu_tokens" in rs[0]:
            cpu_token = _median([r["cpu_s"] / r["cpu_tokens"] * 1e9 for r in rs], ".1f")
        cells = (kind, w, docs_s, tokens_s, ratio, worker_doc, busy, cpu_doc, cpu_token, first)
        print(f"| {' | '.join(cells)} |")

    row("reference (1 process)", "–", ref, None)
    for w in worker_counts:
        scale = min(w, cores)
        print(
            f"| ceiling = {scale} × reference | {w} | "
            f"{_median([scale * r['documents'] / r['wall_s'] for r in ref], ',.0f')} | "
            f"{_median([scale * v / 1e6 for v in ref_rates], '.3f')} | 1.00 | – | – | – | – | – |"
        )
        for kind in KINDS[1:]:
            rs = runs[kind, w]
            key = "batch_tokens" if kind == "loader-batches" else "tokens"
            ratios = [
                r[key] / r["wall_s"] / (scale * v) for r, v in zip(rs, ref_rates, strict=True)
            ]
            row(kind, str(w), rs, ratios)

    print()
    ref_cpu = [r["cpu_s"] / r["documents"] for r in ref]
    for w in worker_counts:
        worker_ratios = [
            r["workers_cpu_s"] / r["documents"] / v
            for kind in KINDS[1:]
            for r, v in zip(runs[kind, w], ref_cpu, strict=True)
        ]
        print(
            f"workers={w}: worker CPU per document ÷ the reference's (paired by round, both "
            f"loader kinds): {statistics.median(worker_ratios):.2f} "
            f"({min(worker_ratios):.2f}–{max(worker_ratios):.2f})"
        )
    per_doc = [r["wall_s"] / r["documents"] * 1e6 for r in ref]
    read = [r["read_s"] / r["documents"] * 1e6 for r in ref]
    print(
        f"reference: {_median(per_doc, '.0f')} µs/doc, of which read (pread, decompress, tar "
        f"walk, UTF-8 check) {_median(read, '.0f')} µs, decode + encode the rest; its CPU "
        f"{_median([r['cpu_s'] / r['wall_s'] for r in ref], '.2f')} of its wall; "
        f"load_tokenizer({TOKENIZER!r}) {_median([r['load_s'] for r in ref], '.2f')} s (untimed). "
        "÷ ceiling: tokens/s paired with the same round's reference, median (min–max); "
        "consumer CPU from after the first document (batch) out"
    )


if __name__ == "__main__":
    main()
