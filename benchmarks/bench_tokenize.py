"""Tokenizing: ``owt tokenize -j 2`` end to end against the tokenizers alone over the same
texts in memory (issue 20), or (``--loader``) the loader's token stream against one process.

Usage: python benchmarks/bench_tokenize.py [PATHS...] [--repeat 2]
       python benchmarks/bench_tokenize.py --loader [PATHS...] [--repeat 3] [--workers 1,2]
No path means the built-in bench corpus (335 MB). Every measurement runs in a fresh child process
(this script with ``--child KIND``, printing one JSON line), rounds interleaved (every kind
once, in a rotating order, ``--repeat`` times); the page cache is warmed first.

Default kinds, all over every document of the corpus:

- (a) owt-tokenize: the command ``owt tokenize PATHS --out TMP -j 2 -q`` (``python -m
  openwebtext.cli``), timed as a whole process: start-up, loading the tokenizer, decompress,
  tokenize, write train.bin/val.bin, sha256. With the default spec "gpt2": the fast backend
  where installed.
- (a') prepare: ``prepare(corpus, out, PrepareOptions(workers=2))`` in the child, the
  tokenizer loaded before the clock: the same work without the CLI's start-up.
- (b) tiktoken-threads: every text read into memory first (untimed), then tiktoken
  (``gpt2@tiktoken``) ``encode`` on 2 threads (tiktoken releases the GIL), half the
  documents each; the ids are counted. Its chunk cache starts empty (a fresh process).
- (c) fast-processes: the same texts, the fast backend (``gpt2@splintr``) loaded in the
  child, which then forks 2 processes, each encoding its half with ``encode_packed`` (the
  ids as uint16 arrays, 390 documents a call, as a worker does with a member); the ids are
  counted. splintr holds the GIL, hence processes. Wall from the fork to both joined.

- (d) xz-processes: every member's compressed bytes read into memory first (untimed, by
  pread), then 2 forked processes, half the members each, each member ``lzma.decompress``-ed
  (other formats: ``formats.decompress``) and its inner tar walked (``tarwalk.walk``: names,
  offsets, sizes), the output dropped: what a worker does besides tokenizing, less the
  UTF-8 check, the decode to ``str`` and the hand-over. Wall from the fork to both joined;
  the walk's CPU is timed apart and reported (it is included in d).

Read ``a ÷ b``, ``a ÷ c`` and ``a ÷ (c + d)``: wall times paired by round, median
(min–max). Issue 20's targets: a ÷ b <= 0.55, a ÷ c <= 1.2. ``c + d`` is the floor of a
pipeline that must decompress and tokenize on the same 2 cores: ``a ÷ (c + d)`` is how
close ``owt tokenize`` comes to it (1.0: no cost but the two). The CPU columns (all
processes' user + system time, children included) and their ratios say the same with less
noise on a loaded machine.

``--loader``: the loader's token throughput against one process that only reads and
tokenizes, in the same run. The documents are the loader's first ``--take`` (seed 0),
rounded UP to the end of their shuffle block (the loader tokenizes whole members and hands a
block out only once all of it is tokenized, so the workers then tokenize the documents
handed out, plus the members in flight when the stream stops, which are killed, and the
reference can process the same members); ``--take 0``: all. Rounds: every (kind, workers)
once (in a rotating order), then all of them again, ``--repeat`` times.

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
import lzma
import multiprocessing
import os
import resource
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

from openwebtext import Corpus, Loader, Options
from openwebtext.engine import Reader
from openwebtext.formats import XZ, decompress
from openwebtext.plan import plan
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.records import Unit
from openwebtext.tarwalk import walk
from openwebtext.tokenizer import load_tokenizer

KINDS = ("reference", "loader-tokens", "loader-batches")  # --loader
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


def _child_of_loader(kind: str, paths: list[str], workers: int, units: int, take: int) -> None:
    if kind == "reference":
        report = _child_reference(paths, units)
    elif kind == "loader-tokens":
        report = _child_loader_tokens(paths, workers, take)
    else:
        report = _child_loader_batches(paths, workers, take)
    print(json.dumps(report))

# ---------------------------------------------------------------- owt tokenize vs tokenizers

TOKENIZE_KINDS = ("owt-tokenize", "prepare", "tiktoken-threads", "fast-processes", "xz-processes")
WORKERS = 2
PACK = 390  # documents per encode_packed call in fast-processes: a generated member's


def _texts(paths: list[str]) -> list[str]:
    """Every document's text, in corpus order (what ``owt tokenize`` tokenizes)."""
    reader = _reader()
    texts = []
    try:
        for unit in Corpus.open(paths).units:
            member = reader.read(unit)
            for offset, size in zip(member.offsets, member.sizes, strict=True):
                if offset >= 0:
                    texts.append(member.data[offset : offset + size].decode("utf-8"))
    finally:
        reader.close()
    return texts


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _child_owt_tokenize(paths: list[str], out: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "openwebtext.cli", "tokenize", *paths, "--out", out,
               "-j", str(WORKERS), "-q"]  # fmt: skip
    wall = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    if done.returncode != 0:
        sys.exit(f"owt tokenize failed ({done.returncode}): {done.stderr[-2000:]}")
    meta = json.loads((Path(out) / "meta.json").read_text())
    return {
        "wall_s": wall,
        "cpu_s": _cpu_of_children(),
        "documents": sum(meta["counts"]["documents"].values()),
        "tokens": sum(meta["counts"]["tokens"].values()),
    }


def _child_prepare(paths: list[str], out: str) -> dict[str, Any]:
    corpus = Corpus.open(paths)
    backend = load_tokenizer("gpt2").backend  # loaded before the clock
    cpu = time.process_time()
    wall = time.perf_counter()
    report = prepare(corpus, out, PrepareOptions(workers=WORKERS))
    wall = time.perf_counter() - wall
    meta = report.meta
    return {
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu + _cpu_of_children(),
        "documents": sum(meta["counts"]["documents"].values()),
        "tokens": sum(meta["counts"]["tokens"].values()),
        "backend": backend,
    }


def _child_tiktoken_threads(paths: list[str]) -> dict[str, Any]:
    texts = _texts(paths)
    tokenizer = load_tokenizer("gpt2@tiktoken")
    encode = tokenizer.encode

    def count(part: list[str]) -> int:
        return sum(len(encode(t)) + 1 for t in part)

    half = len(texts) // 2
    cpu = time.process_time()
    wall = time.perf_counter()
    with ThreadPoolExecutor(WORKERS) as pool:
        tokens = sum(pool.map(count, [texts[:half], texts[half:]]))
    wall = time.perf_counter() - wall
    return {"wall_s": wall, "cpu_s": time.process_time() - cpu, "documents": len(texts),
            "tokens": tokens, "backend": tokenizer.backend}  # fmt: skip


def _encode_half(texts: list[str], write_end: int) -> None:
    """In a forked process: the ids of ``texts``, counted, written to ``write_end``."""
    tokenizer = load_tokenizer("gpt2@splintr")  # the parent's, from the cache
    tokens = 0
    for start in range(0, len(texts), PACK):
        ids, _ = tokenizer.encode_packed(texts[start : start + PACK])
        tokens += len(ids)
    os.write(write_end, str(tokens).encode())
    os._exit(0)


def _child_fast_processes(paths: list[str]) -> dict[str, Any]:
    texts = _texts(paths)
    tokenizer = load_tokenizer("gpt2@splintr")  # TokenizerError if it is missing or inexact
    tokenizer.encode("warm up, once")
    half = len(texts) // 2
    context = multiprocessing.get_context("fork")
    pipes = [os.pipe() for _ in range(WORKERS)]
    wall = time.perf_counter()
    workers = [
        context.Process(target=_encode_half, args=(part, pipe[1]))
        for part, pipe in zip([texts[:half], texts[half:]], pipes, strict=True)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - wall
    tokens = 0
    for (read_end, write_end), worker in zip(pipes, workers, strict=True):
        os.close(write_end)
        if worker.exitcode != 0:
            sys.exit(f"a fast-processes worker failed ({worker.exitcode})")
        tokens += int(os.read(read_end, 64))
        os.close(read_end)
    return {"wall_s": wall, "cpu_s": _cpu_of_children(), "documents": len(texts),
            "tokens": tokens, "backend": tokenizer.backend}  # fmt: skip


def _decompress_half(units: list[Unit], raws: list[bytes], write_end: int) -> None:
    """In a forked process: decompress and walk ``raws``; (documents, walk CPU s) to
    ``write_end`` (CPU time: the share stays right when other processes take the cores)."""
    limit = Options().max_member_bytes
    clock = time.process_time
    documents = 0
    walk_s = 0.0
    for unit, raw in zip(units, raws, strict=True):
        data = lzma.decompress(raw) if unit.kind == XZ else decompress(raw, unit.kind, limit)
        t0 = clock()
        documents += len(walk(data).names)
        walk_s += clock() - t0
        del data
    os.write(write_end, json.dumps([documents, walk_s]).encode())
    os._exit(0)


def _child_xz_processes(paths: list[str]) -> dict[str, Any]:
    units = list(Corpus.open(paths).units)
    raws = []
    for unit in units:  # into memory first, untimed
        with open(unit.path, "rb") as f:
            raws.append(os.pread(f.fileno(), unit.size, unit.offset))
    half = len(units) // 2
    context = multiprocessing.get_context("fork")
    pipes = [os.pipe() for _ in range(WORKERS)]
    wall = time.perf_counter()
    workers = [
        context.Process(target=_decompress_half, args=(part_units, part_raws, pipe[1]))
        for part_units, part_raws, pipe in zip(
            [units[:half], units[half:]], [raws[:half], raws[half:]], pipes, strict=True
        )
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - wall
    documents = 0
    walk_s = []
    for (read_end, write_end), worker in zip(pipes, workers, strict=True):
        os.close(write_end)
        if worker.exitcode != 0:
            sys.exit(f"an xz-processes worker failed ({worker.exitcode})")
        count, seconds = json.loads(os.read(read_end, 256))
        documents += count
        walk_s.append(seconds)
        os.close(read_end)
    return {"wall_s": wall, "cpu_s": _cpu_of_children(), "documents": documents,
            "compressed_bytes": sum(len(r) for r in raws), "walk_s": max(walk_s),
            "walk_cpu_s": sum(walk_s)}  # fmt: skip


def _child(args: argparse.Namespace) -> None:
    kind = args.child
    if kind in KINDS:
        _child_of_loader(kind, args.paths, int(args.workers), args.units, args.take)
        return
    if kind == "owt-tokenize":
        report = _child_owt_tokenize(args.paths, args.out)
    elif kind == "prepare":
        report = _child_prepare(args.paths, args.out)
    elif kind == "tiktoken-threads":
        report = _child_tiktoken_threads(args.paths)
    elif kind == "xz-processes":
        report = _child_xz_processes(args.paths)
    else:
        report = _child_fast_processes(args.paths)
    print(json.dumps(report))


def _ratios(over: list[dict[str, Any]], under: list[dict[str, Any]], key: str = "wall_s") -> str:
    values = [a[key] / b[key] for a, b in zip(over, under, strict=True)]
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def _summed(*kinds: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per round, the wall and CPU seconds of ``kinds`` added up (c + d: the floor)."""
    return [
        {key: sum(r[key] for r in rs) for key in ("wall_s", "cpu_s")}
        for rs in zip(*kinds, strict=True)
    ]


def _main_tokenize(args: argparse.Namespace) -> None:
    """The default: owt tokenize -j 2 against tiktoken on 2 threads and splintr on 2 processes."""
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in TOKENIZE_KINDS}
    scratch = Path(tempfile.mkdtemp(prefix="bench-tokenize-", dir=os.getcwd()))
    load = OtherLoad()
    try:
        for r in range(args.repeat):
            turn = r % len(TOKENIZE_KINDS)
            order = TOKENIZE_KINDS[turn:] + TOKENIZE_KINDS[:turn]
            for kind in order:
                out = scratch / f"{kind}-{r}"
                report = run_child(__file__, kind, ["--out", str(out), *args.paths])
                shutil.rmtree(out, ignore_errors=True)
                runs[kind].append(report)
                rate = (f"{report['tokens'] / report['wall_s'] / 1e6:.2f} M tokens/s"
                        if "tokens" in report else
                        f"{report['compressed_bytes'] / report['wall_s'] / 1e6:.1f} MB xz/s")
                print(f"round {r + 1}/{args.repeat} {kind}: {report['wall_s']:.2f} s, {rate}",
                      file=sys.stderr)  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    seconds, other, steal = load.measure()
    counts = {(r["documents"], r["tokens"]) for rs in runs.values() for r in rs if "tokens" in r}
    if len(counts) != 1:
        sys.exit(f"the kinds did not see the same documents and ids: {sorted(counts)}")
    (documents, tokens), = counts
    walked = {r["documents"] for r in runs["xz-processes"]}
    if len(walked) != 1 or walked.pop() < documents:
        sys.exit(f"xz-processes walked other documents than were tokenized: {sorted(walked)}")
    floor = _summed(runs["fast-processes"], runs["xz-processes"])
    print(f"CPU: {cpu_model()}; {len(os.sched_getaffinity(0))} usable cores; Python "
          f"{sys.version.split()[0]}; owt tokenize's backend: {runs['prepare'][0]['backend']}")
    print(f"corpus: {' '.join(args.paths)}: {documents:,} documents, {tokens:,} GPT-2 ids "
          "(with the end-of-text ids)")
    print(f"{args.repeat} rounds in {seconds:.0f} s; other processes kept {max(other, 0):.2f} "
          f"cores busy meanwhile (steal {steal:.2f})\n")  # fmt: skip
    print("| kind | wall s (median) | min–max | M tokens/s | CPU s | CPU ns/id | ÷ b (paired) "
          "| ÷ c (paired) | ÷ (c + d) (paired) | CPU ÷ b | CPU ÷ c | CPU ÷ (c + d) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    names = {"owt-tokenize": "(a) owt tokenize -j 2, whole process",
             "prepare": "(a') prepare(), workers=2, tokenizer loaded first",
             "tiktoken-threads": "(b) tiktoken alone, 2 threads, texts in memory",
             "fast-processes": "(c) splintr alone, 2 processes, texts in memory",
             "xz-processes": "(d) decompress + tar walk alone, 2 processes, xz in memory",
             "floor": "(c + d) the floor: both on the same 2 cores"}  # fmt: skip
    rows = {**runs, "floor": floor}
    for kind, rs in rows.items():
        walls = [r["wall_s"] for r in rs]
        cpu = statistics.median(r["cpu_s"] for r in rs)
        print(
            f"| {names[kind]} | {statistics.median(walls):.2f} | {min(walls):.2f}–"
            f"{max(walls):.2f} | {tokens / statistics.median(walls) / 1e6:.2f} | "
            f"{cpu:.2f} | {cpu / tokens * 1e9:.0f} | "
            f"{_ratios(rs, runs['tiktoken-threads'])} | {_ratios(rs, runs['fast-processes'])} | "
            f"{_ratios(rs, floor)} | {_ratios(rs, runs['tiktoken-threads'], 'cpu_s')} | "
            f"{_ratios(rs, runs['fast-processes'], 'cpu_s')} | {_ratios(rs, floor, 'cpu_s')} |"
        )
    print()
    d = runs["xz-processes"]
    print(f"(d): {d[0]['compressed_bytes'] / 1e6:.0f} MB of xz; the tar walk "
          f"{_median([r['walk_cpu_s'] for r in d], '.2f')} CPU s of its "
          f"{_median([r['cpu_s'] for r in d], '.2f')} "
          f"({_median([r['walk_cpu_s'] / r['cpu_s'] for r in d], '.1%')}); "
          f"the rest is decompression")  # fmt: skip
    for kind in ("owt-tokenize", "prepare"):
        print(f"{kind}: a ÷ b = {_ratios(runs[kind], runs['tiktoken-threads'])} (target <= 0.55), "
              f"a ÷ c = {_ratios(runs[kind], runs['fast-processes'])} (target <= 1.2), "
              f"a ÷ (c + d) = {_ratios(runs[kind], floor)} (CPU: "
              f"{_ratios(runs[kind], floor, 'cpu_s')})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--loader", action="store_true", help="the loader's token stream")
    parser.add_argument("--repeat", type=int, default=0, help="rounds (default 2; --loader 3)")
    parser.add_argument("--workers", default="1,2", help="--loader: worker counts, e.g. 1,2")
    parser.add_argument("--take", type=int, default=20000, help="--loader: documents (0: all)")
    parser.add_argument("--units", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=KINDS + TOKENIZE_KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if not args.paths:
        from openwebtext.synth import bench_corpus

        args.paths = [str(bench_corpus())]
    if args.loader:
        args.repeat = args.repeat or 3
        _main_loader(args)
    else:
        args.repeat = args.repeat or 2
        warm_page_cache(args.paths)
        _main_tokenize(args)


def _median(values: list[float], fmt: str) -> str:
    return format(statistics.median(values), fmt)


def _main_loader(args: argparse.Namespace) -> None:
    """``--loader``: the loader's token throughput against one reading process."""
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
