"""The consumer's CPU per document: the loader's, against the floor of building each str.

Usage: python benchmarks/bench_consumer.py [PATHS...] [--repeat 5] [--workers 2]
No path means the built-in generated corpus. Every measurement runs in a fresh child process
(this script with ``--child KIND``, printing one JSON line), and the rounds are interleaved:
every kind once (in a rotating order), then all of them again, ``--repeat`` times. Each child
reports the CPU seconds (``time.process_time()``) of its main process over the timed part,
divided by the documents:

- loader: ``for d in Loader(corpus, workers=W, seed=0): pass`` over the whole corpus, timed
  after ``Corpus.open`` (as ``python -m openwebtext.bench run-one`` does); also its wall docs/s.
- loader-touch: the same, the loop reading ``len(d.text)``: the loop is not what is measured.
- floor-str: what any loader that hands out ``str`` documents must at least spend. Untimed,
  the child reads every member itself (``openwebtext.engine.read.Reader``, in the loader's plan
  order) and lays the decompressed members out one after the other in ONE anonymous shared
  mapping (like the pool's slots, and larger than the L2 caches; the L3 may hold part of it).
  Timed: a plain generator that walks the same shuffle blocks (>= 4,096 documents of
  consecutive members, each permuted by ``openwebtext.plan.permutation``, precomputed) and,
  per document, does ``str(view[o:o+s], "utf-8")`` and ``tuple.__new__(Document, (...))``;
  the consumer drops each one. Its memory was written long before, so it is at best as warm
  as the loader's slot (just written by a worker on the other core): a lower bound.
- floor-decode-warm: the pure decode: chunks of 32 documents (each its own ``bytes``) are
  decoded once untimed, then again timed; the cost of the timer around an empty pass over the
  chunk is subtracted.

Read: ``loader ÷ floor-str`` and ``loader − floor-str`` (the µs per document the loader adds
to the unavoidable cost), each the median over rounds of the values paired in one round.
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

from common import OtherLoad, cpu_model, run_child, warm_page_cache

from openwebtext import Corpus, Document, Loader, Options
from openwebtext.engine import Reader
from openwebtext.plan import DOCUMENTS, UNITS, permutation

KINDS = ("loader", "loader-touch", "floor-str", "floor-decode-warm")
BLOCK = 4096  # Options.shuffle_buffer's default
SEED = 0
CHUNK = 32  # documents per timed chunk of floor-decode-warm (~300 KB: fits in L2)

# One block: per document, its offset in the buffer, size, subset, name, member, member
# index and document index (parallel lists), then the order the block is handed out in.
Block = tuple[
    list[int], list[int], list[str], list[str], list[str], list[int], list[int], list[int]
]


def _gc_collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


def _child_loader(paths: list[str], workers: int, touch: bool) -> dict[str, Any]:
    corpus = Corpus.open(paths)
    gcs = _gc_collections()
    wall = time.perf_counter()
    cpu = time.process_time()
    chars = 0
    with Loader(corpus, workers=workers, seed=SEED).iter() as docs:
        if touch:
            for d in docs:
                chars += len(d.text)
        else:
            for _ in docs:
                pass
        stats = docs.stats
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    return {
        "documents": stats.documents,
        "text_bytes": stats.text_bytes,
        "cpu_s": cpu,
        "wall_s": wall,
        "gc": _gc_collections() - gcs,
        "chars": chars,
    }


def _layout(paths: list[str]) -> tuple[mmap.mmap, list[Block]]:
    """Every member, decompressed, laid out in plan order in one mapping; and the blocks."""
    corpus = Corpus.open(paths)
    options = Options()
    reader = Reader(options.max_member_bytes, options.max_document_bytes)
    order = permutation(len(corpus.units), SEED, UNITS, 0)  # plan(shuffle=True), rank 0 of 1
    members = []
    try:
        for position in order:
            unit = corpus.units[position]
            members.append((unit, reader.read(unit)))
    finally:
        reader.close()
    buffer = mmap.mmap(-1, sum(len(m.data) for _, m in members))
    blocks: list[Block] = []
    block: Block = ([], [], [], [], [], [], [], [])
    block_start = base = 0
    for position, (unit, m) in enumerate(members):
        buffer[base : base + len(m.data)] = m.data
        offsets, sizes, subsets, names_, member_names, mis, js, _ = block
        member_name = os.path.basename(unit.member)
        for j, offset in enumerate(m.offsets):
            if offset < 0:  # left out by the reader, as the loader leaves it out
                continue
            offsets.append(base + offset)
            sizes.append(m.sizes[j])
            subsets.append(unit.subset)
            member_names.append(member_name)
            names_.append(m.names[j])
            mis.append(unit.member_index)
            js.append(j)
        base += len(m.data)
        members[position] = (unit, m._replace(data=b""))  # free the member's bytes
        if len(offsets) >= BLOCK or (offsets and position == len(members) - 1):
            n = len(offsets)
            block[7].extend(permutation(n, SEED, DOCUMENTS, 0, 0, block_start))
            blocks.append(block)
            block = ([], [], [], [], [], [], [], [])
            block_start = position + 1
    return buffer, blocks


def _floor_documents(view: memoryview, blocks: list[Block]) -> Iterator[Document]:
    new = tuple.__new__
    for offsets, sizes, subsets, names, members, mis, js, order in blocks:
        for k in order:
            offset = offsets[k]
            text = str(view[offset : offset + sizes[k]], "utf-8")
            yield new(Document, (text, subsets[k], members[k], names[k], mis[k], js[k]))


def _child_floor_str(paths: list[str]) -> dict[str, Any]:
    buffer, blocks = _layout(paths)
    view = memoryview(buffer)
    gcs = _gc_collections()
    cpu = time.process_time()
    for _ in _floor_documents(view, blocks):
        pass
    cpu = time.process_time() - cpu
    gcs = _gc_collections() - gcs
    documents = sum(len(b[0]) for b in blocks)
    text_bytes = sum(sum(b[1]) for b in blocks)
    non_ascii = sum(
        not view[o : o + s].tobytes().isascii()
        for b in blocks
        for o, s in zip(b[0], b[1], strict=True)
    )
    return {
        "documents": documents,
        "text_bytes": text_bytes,
        "cpu_s": cpu,
        "gc": gcs,
        "non_ascii": non_ascii,
        "blocks": len(blocks),
        "buffer_bytes": len(buffer),
    }


def _child_floor_decode_warm(paths: list[str]) -> dict[str, Any]:
    buffer, blocks = _layout(paths)
    view = memoryview(buffer)
    spans = [(b[0][k], b[1][k]) for b in blocks for k in b[7]]
    clock = time.process_time
    decode = timer = 0.0
    for c in range(0, len(spans), CHUNK):
        chunk = [view[o : o + s].tobytes() for o, s in spans[c : c + CHUNK]]
        for b in chunk:
            str(b, "utf-8")
        t0 = clock()
        for b in chunk:
            str(b, "utf-8")
        t1 = clock()
        for _ in chunk:
            pass
        t2 = clock()
        decode += t1 - t0
        timer += t2 - t1
    return {
        "documents": len(spans),
        "text_bytes": sum(s for _, s in spans),
        "cpu_s": decode - timer,
        "timer_s": timer,
    }


def _child(kind: str, paths: list[str], workers: int) -> None:
    if kind in ("loader", "loader-touch"):
        report = _child_loader(paths, workers, touch=kind == "loader-touch")
    elif kind == "floor-str":
        report = _child_floor_str(paths)
    else:
        report = _child_floor_decode_warm(paths)
    print(json.dumps(report))










def _us(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.paths, args.workers)
        return
    if not args.paths:
        from openwebtext.synth import bench_corpus

        args.paths = [str(bench_corpus())]
    warm_page_cache(args.paths)

    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    load = OtherLoad()
    for r in range(args.repeat):
        for kind in KINDS[r % len(KINDS) :] + KINDS[: r % len(KINDS)]:
            report = run_child(__file__, kind, ["--workers", str(args.workers), *args.paths])
            runs[kind].append(report)
            us = report["cpu_s"] / report["documents"] * 1e6
            print(f"round {r + 1}/{args.repeat} {kind}: {us:.2f} µs/doc", file=sys.stderr)
    seconds, other, steal = load.measure()

    counts = {(r["documents"], r["text_bytes"]) for rs in runs.values() for r in rs}
    if len(counts) != 1:
        sys.exit(f"the kinds did not see the same documents: {sorted(counts)}")
    floor = runs["floor-str"][0]
    documents, text_bytes = floor["documents"], floor["text_bytes"]
    per_doc = {k: [r["cpu_s"] / r["documents"] * 1e6 for r in rs] for k, rs in runs.items()}

    print(
        f"CPU: {cpu_model()}; {len(os.sched_getaffinity(0))} usable cores; "
        f"Python {sys.version.split()[0]}"
    )
    print(
        f"corpus: {' '.join(args.paths)}: {documents:,} documents, {text_bytes / 1e6:.0f} MB of "
        f"text ({text_bytes / documents / 1e3:.1f} KB/doc), "
        f"{floor['non_ascii'] / documents:.1%} of documents not pure ASCII, "
        f"{floor['blocks']} shuffle blocks; floor buffer {floor['buffer_bytes'] / 1e6:.0f} MB"
    )
    print(
        f"{args.repeat} rounds in {seconds:.0f} s, workers={args.workers}; other processes kept "
        f"{max(other, 0.0):.2f} cores busy meanwhile (steal {steal:.2f} cores)\n"
    )
    print("| kind | CPU µs/doc (median) | min–max | ÷ floor-str | wall docs/s |")
    print("|---|---|---|---|---|")
    floor_us = per_doc["floor-str"]
    for kind in KINDS:
        values = per_doc[kind]
        ratio = statistics.median(v / f for v, f in zip(values, floor_us, strict=True))
        wall = ""
        if "wall_s" in runs[kind][0]:
            wall = f"{statistics.median(r['documents'] / r['wall_s'] for r in runs[kind]):,.0f}"
        print(
            f"| {kind} | {_us(values)} | {min(values):.2f}–{max(values):.2f} | "
            f"{ratio:.2f} | {wall or '–'} |"
        )
    loader = per_doc["loader"]
    ratios = [v / f for v, f in zip(loader, floor_us, strict=True)]
    diffs = [v - f for v, f in zip(loader, floor_us, strict=True)]
    print(
        f"\nloader ÷ floor-str: {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f}–{max(ratios):.2f}); loader − floor-str: "
        f"{statistics.median(diffs):.2f} µs/doc ({min(diffs):.2f}–{max(diffs):.2f}); "
        "medians of the values paired by round"
    )
    gcs = {k: sum(r.get("gc", 0) for r in rs) for k, rs in runs.items() if k != "floor-decode-warm"}
    timer = statistics.median(
        r["timer_s"] / r["documents"] * 1e6 for r in runs["floor-decode-warm"]
    )
    print(
        f"gc collections in the timed parts (all rounds): {gcs}; "
        f"floor-decode-warm: {timer:.3f} µs/doc of timer subtracted"
    )


if __name__ == "__main__":
    main()
