"""Mixtures (issue 36): what reading a ``Mixture`` costs against the same files read as one
corpus, measured in the same run.

1. **read**: the corpus's tar files divided into two parts (the first half of the files,
   rounded up, and the rest), read as ``Mixture({"a": A, "b": B}, weights)`` and as one
   corpus of all the files, whole epochs (``epochs=1``: the mixture's run ends when both
   parts have handed out their epoch), ``--workers`` 1 and 2, seed 0. Two weightings:
   ``sized`` (each part's documents: both parts end their epoch together, so the mixture hands
   out the same documents as the corpus, give or take one) and ``even`` (0.5/0.5: the smaller
   part is repeated while the larger one ends its epoch, so more documents in all). Compared in
   documents/s: each mixture run's rate divided by the one corpus's rate of the same round and
   worker count (the issue asks >= 0.9), median over rounds.
2. **first**: time to the first document of a mixture of ``--parts`` parts of ``--files``
   small tar files each (one member of ``--docs`` documents per file), equal weights,
   ``workers=2``, and of one corpus of the same files (the reference), ``world_size`` 1 and
   2 (rank 0), counts cached first (``ensure_counts`` on every part and on the whole, what
   ``owt index`` does, as a user would before a run). Timed in the child from before the
   corpora are opened (``Mixture(...)`` / ``Corpus.open``) to the first document handed out,
   and on to a document of every part (the first ``parts`` documents; of the one corpus, as
   many documents): a stream fills a shuffle block (``shuffle_buffer``, 4,096 documents, or
   the whole part if smaller) before its first document, so a mixture's first document waits
   for one part's block, and one of every part for every part's. The parent also times the
   whole child process (interpreter, imports and close included).
   The files are one generated corpus (``openwebtext.synth.write_corpus(subsets=FILES,
   members=1, docs=DOCS)``) copied into each part's folder: generating 6,400 files one by
   one costs minutes of two cores, and only the files' number and sizes matter here.

3. **turns**: what choosing the part of each document costs (``Interleave.choose`` and
   ``take``, by documents, random weights), per document, for 2 to 400 parts: as a loop over
   the parts and as arrays (``mixing.WIDE``: from where the arrays take over), in this process.

Every run is a fresh child process (``openwebtext.bench``'s runner, through ``common``),
the page cache warm; rounds alternate the cases, the order rotated each round. Progress and
the summary go to stderr, one line of JSON to stdout (``--json FILE``: also written there).

Usage: python benchmarks/bench_mixture.py [CORPUS] [--workers 1,2] [--rounds 5]
    [--parts 64] [--files 100] [--docs 4] [--first-rounds 5] [--world-sizes 1,2]
    [--only read|first|turns] [--smoke] [--json FILE]

With no CORPUS, the built-in bench corpus (3 subset tars, 70,200 documents; parts of 2 and 1
files). ``--smoke`` writes tiny corpora into a temporary folder and runs one round of each
case (seconds): it checks that the script works, not the speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import common

from openwebtext import Corpus, Loader
from openwebtext.loader import Mixture
from openwebtext.stream import ensure_counts

READ_CASES = ("one", "sized", "even")
LAYOUTS = ("one", "mix")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def rotated(items: list[Any], round_number: int) -> list[Any]:
    """``items`` starting at a different one each round (no case always first or last)."""
    k = round_number % len(items)
    return items[k:] + items[:k]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


# -- the children ---------------------------------------------------------------------------


def read_child(args: argparse.Namespace) -> None:
    """One whole epoch (of the corpus, or of both parts); one line of JSON."""
    start = time.perf_counter()
    cpu = time.process_time()
    if args.case == "one":
        source: Corpus | Mixture = Corpus.open([*args.a, *args.b])
    else:
        weights = dict(zip("ab", map(float, args.weights.split(",")), strict=True))
        source = Mixture({"a": args.a, "b": args.b}, weights)
    documents = 0
    sources: dict[str, int] = {}
    with Loader(source, workers=int(args.workers), seed=0, epochs=1).iter() as it:
        for document in it:
            documents += 1
            if document.source is not None:
                sources[document.source] = sources.get(document.source, 0) + 1
        stats = it.stats
        parts = getattr(stats, "parts", {})
        report: dict[str, Any] = {
            "documents": documents,
            "units": stats.units,
            "parts": {
                name: {"documents": s.documents, "units": s.units, "handed": sources.get(name, 0)}
                for name, s in parts.items()
            },
        }
    seconds = time.perf_counter() - start
    report.update(seconds=seconds, documents_per_s=documents / seconds)
    report["consumer_cpu_s"] = time.process_time() - cpu
    print(json.dumps(report))


def first_child(args: argparse.Namespace) -> None:
    """Open the parts (or the whole), start, take one document, close; one line of JSON."""
    paths = part_folders(Path(args.root), args.parts)
    start = time.perf_counter()
    if args.layout == "mix":
        source: Corpus | Mixture = Mixture({f"p{i:02d}": str(p) for i, p in enumerate(paths)})
    else:
        source = Corpus.open([str(p) for p in paths])
    opened = time.perf_counter()
    loader = Loader(source, workers=int(args.workers), seed=0, world_size=args.world_size, rank=0)
    it = loader.iter()
    documents = iter(it)
    document = next(documents)
    first = time.perf_counter()
    # Then on to a document of every part (equal weights: the first ``parts`` documents);
    # of the one corpus, as many documents.
    seen, count = {document.source}, 1
    while (len(seen) if args.layout == "mix" else count) < args.parts:
        seen.add(next(documents).source)
        count += 1
    every = time.perf_counter()
    it.close()
    closed = time.perf_counter()
    print(json.dumps({
        "open_s": opened - start,
        "first_s": first - start,
        "every_part_s": every - start,
        "documents_to_every_part": count,
        "close_s": closed - every,
        "source": document.source,
    }))  # fmt: skip


# -- the corpora ----------------------------------------------------------------------------


def split_files(corpus: str) -> tuple[list[str], list[str]]:
    """The corpus's files in order, divided in two (the first half rounded up, the rest)."""
    files = list(dict.fromkeys(u.path for u in Corpus.open(corpus).units))
    if len(files) < 2:
        sys.exit(f"{corpus}: {len(files)} file(s); two parts need at least two files")
    half = math.ceil(len(files) / 2)
    return sorted(files)[:half], sorted(files)[half:]


def counted(paths: list[str]) -> int:
    """The documents of ``paths``, counted once and cached (``owt index``)."""
    options = Loader(paths, world_size=2).options
    corpus = ensure_counts(Corpus.open(paths), options, progress=lambda _: None)
    assert corpus.counts is not None
    return sum(corpus.counts.documents)


def part_folders(root: Path, parts: int) -> list[Path]:
    return [root / f"part{i:02d}" for i in range(parts)]


def make_parts(root: Path, parts: int, files: int, docs: int) -> list[Path]:
    """``parts`` folders under ``root``, each a copy of one generated corpus of ``files``
    files (one member of ``docs`` documents each); made once, kept for the next run."""
    from openwebtext.synth import COMPLETE_MARKER, write_corpus

    generated = root / "generated"
    if not (generated / COMPLETE_MARKER).is_file():
        say(f"generating {files} files of {docs} documents into {generated} ...")
        shutil.rmtree(generated, ignore_errors=True)
        write_corpus(generated, subsets=files, members=1, docs=docs, seed=0)
    folders = part_folders(root, parts)
    for folder in folders:
        if not (folder / COMPLETE_MARKER).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(generated, partial)
            os.replace(partial, folder)
    return folders


@contextlib.contextmanager
def work_folder(smoke: bool, name: str) -> Iterator[Path]:
    """A temporary folder under --smoke, else ``name`` in the cache folder (kept)."""
    if smoke:
        with tempfile.TemporaryDirectory(prefix="bench-mixture-") as tmp:
            yield Path(tmp)
        return
    from openwebtext.files import cache_root

    yield cache_root() / name


# -- the measurements -----------------------------------------------------------------------


def measure_read(a: list[str], b: list[str], args: argparse.Namespace) -> dict[str, Any]:
    documents = {"a": counted(a), "b": counted(b)}
    weights = {"sized": f"{documents['a']},{documents['b']}", "even": "1,1"}
    say(f"read: part a {len(a)} files, {documents['a']:,} documents; part b {len(b)} files, "
        f"{documents['b']:,} documents; {args.rounds} rounds")  # fmt: skip
    common.warm_page_cache([*a, *b])
    workers = [int(w) for w in args.workers.split(",")]
    cases = [(w, case) for w in workers for case in READ_CASES]
    runs: list[dict[str, Any]] = []
    load = common.OtherLoad()
    for round_number in range(args.rounds):
        for w, case in rotated(cases, round_number):
            extra = [] if case == "one" else ["--weights", weights[case]]
            report = common.run_child(
                __file__, "read",
                ["--case", case, "--workers", str(w), "--a", *a, "--b", *b, *extra],
            )  # fmt: skip
            report.update(round=round_number, workers=w, case=case)
            runs.append(report)
            say(f"  round {round_number} workers={w} {case:5s} "
                f"{report['documents_per_s']:8.0f} documents/s ({report['documents']:,} "
                f"documents, {report['units']} members read, {report['seconds']:.2f} s, "
                f"CPU {report['cpu_s']:.1f} s)")  # fmt: skip
    seconds, other, stolen = load.measure()
    say(f"read: {seconds:.0f} s; other processes kept {other:.2f} cores busy, "
        f"the hypervisor stole {stolen:.2f}")  # fmt: skip
    rate = {(r["round"], r["workers"], r["case"]): r["documents_per_s"] for r in runs}
    cpu = {(r["round"], r["workers"], r["case"]): r["cpu_s"] / r["documents"] for r in runs}
    summary: dict[str, Any] = {}

    def mine(w: int, case: str) -> list[dict[str, Any]]:
        return [r for r in runs if r["workers"] == w and r["case"] == case]

    for w in workers:
        for case in READ_CASES:
            rates = [rate[(k, w, case)] for k in range(args.rounds)]
            ratios = [rate[(k, w, case)] / rate[(k, w, "one")] for k in range(args.rounds)]
            cpu_ratios = [cpu[(k, w, "one")] / cpu[(k, w, case)] for k in range(args.rounds)]
            summary[f"workers={w} {case}"] = {
                "documents": statistics.median(r["documents"] for r in mine(w, case)),
                "members_read": statistics.median(r["units"] for r in mine(w, case)),
                "documents_per_s": statistics.median(rates),
                "ratio": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "cpu_ratio": statistics.median(cpu_ratios),
            }
            say(f"  workers={w} {case:5s} {statistics.median(rates):8.0f} documents/s "
                f"({summary[f'workers={w} {case}']['members_read']:g} members read), "
                f"x one corpus {spread(ratios)}; per CPU second x one corpus "
                f"{statistics.median(cpu_ratios):.3f}")  # fmt: skip
    return {
        "files": {"a": a, "b": b},
        "documents": documents,
        "weights": weights,
        "other_cores": other,
        "stolen_cores": stolen,
        "summary": summary,
        "runs": runs,
    }


def measure_first(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    folders = make_parts(root, args.parts, args.files, args.docs)
    paths = [str(p) for p in folders]
    say(f"first: {args.parts} parts x {args.files} files x {args.docs} documents; counting "
        "(once, cached) ...")  # fmt: skip
    for path in paths:
        counted([path])
    counted(paths)
    common.warm_page_cache(paths)
    sizes = [int(s) for s in args.world_sizes.split(",")]
    cases = [(ws, layout) for ws in sizes for layout in LAYOUTS]
    runs: list[dict[str, Any]] = []
    load = common.OtherLoad()
    for round_number in range(args.first_rounds):
        for ws, layout in rotated(cases, round_number):
            began = time.perf_counter()
            report = common.run_child(
                __file__, "first",
                ["--layout", layout, "--root", str(root), "--parts", str(args.parts),
                 "--workers", "2", "--world-size", str(ws)],
            )  # fmt: skip
            report.update(round=round_number, world_size=ws, layout=layout)
            report["process_s"] = time.perf_counter() - began
            runs.append(report)
            say(f"  round {round_number} world_size={ws} {layout:3s} first document "
                f"{report['first_s']:.3f} s (opening {report['open_s']:.3f} s), one of every "
                f"part {report['every_part_s']:.3f} s, process {report['process_s']:.2f} s, "
                f"close {report['close_s']:.3f} s")  # fmt: skip
    seconds, other, stolen = load.measure()
    say(f"first: {seconds:.0f} s; other processes kept {other:.2f} cores busy, "
        f"the hypervisor stole {stolen:.2f}")  # fmt: skip
    by = {(r["round"], r["world_size"], r["layout"]): r for r in runs}
    summary: dict[str, Any] = {}
    for ws in sizes:
        for layout in LAYOUTS:
            mine = [by[(k, ws, layout)] for k in range(args.first_rounds)]
            ones = [by[(k, ws, "one")] for k in range(args.first_rounds)]
            entry = {}
            for what in ("first_s", "open_s", "every_part_s", "process_s"):
                entry[what] = statistics.median(r[what] for r in mine)
                entry[f"{what}_ratio"] = statistics.median(
                    r[what] / o[what] for r, o in zip(mine, ones, strict=True)
                )
            summary[f"world_size={ws} {layout}"] = entry
            say(f"  world_size={ws} {layout:3s} first document {entry['first_s']:.3f} s "
                f"(x one corpus {entry['first_s_ratio']:.2f}), opening {entry['open_s']:.3f} s "
                f"(x {entry['open_s_ratio']:.2f}), one of every part {entry['every_part_s']:.3f} s "
                f"(x {entry['every_part_s_ratio']:.2f}), process {entry['process_s']:.2f} s "
                f"(x {entry['process_s_ratio']:.2f})")  # fmt: skip
    return {
        "parts": args.parts,
        "files": args.files,
        "docs": args.docs,
        "other_cores": other,
        "stolen_cores": stolen,
        "summary": summary,
        "runs": runs,
    }


def measure_turns(smoke: bool) -> dict[str, Any]:
    """µs per document of choosing a part, as a loop and as arrays, by the parts' number."""
    import random

    from openwebtext import mixing

    documents = 2_000 if smoke else 40_000
    rng = random.Random(0)
    out: dict[str, Any] = {"wide_from": mixing.WIDE}
    for parts in (2, 16, 48, 128, 400):
        weights = [rng.random() + 0.01 for _ in range(parts)]
        for how, wide in (("loop", 10**9), ("arrays", 1)):
            saved, mixing.WIDE = mixing.WIDE, wide
            try:
                turns = mixing.Interleave(weights)
                start = time.perf_counter()
                for _ in range(documents):
                    turns.take(turns.choose())
                out[f"{how}_{parts}"] = (time.perf_counter() - start) / documents * 1e6
            finally:
                mixing.WIDE = saved
        say(f"turns of {parts} parts: loop {out[f'loop_{parts}']:.1f} µs/document, arrays "
            f"{out[f'arrays_{parts}']:.1f}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", help="a corpus folder (default: the bench corpus)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the read cases")
    parser.add_argument("--parts", type=int, default=64)
    parser.add_argument("--files", type=int, default=100, help="files per part (<= 100)")
    parser.add_argument("--docs", type=int, default=4, help="documents per file")
    parser.add_argument("--first-rounds", type=int, default=5)
    parser.add_argument("--world-sizes", default="1,2")
    parser.add_argument("--only", choices=("read", "first", "turns"))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round (seconds)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    parser.add_argument("--a", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--b", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--layout", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--world-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "read":
        read_child(args)
        return
    if args.child == "first":
        first_child(args)
        return
    if args.smoke:
        args.rounds = args.first_rounds = 1
        args.parts, args.files, args.docs = 4, 3, 2
    results: dict[str, Any] = {"cpu": common.cpu_model(), "smoke": args.smoke}
    name = f"bench-mixture-f{args.files}-d{args.docs}"
    if args.only == "turns":
        results["turns"] = measure_turns(args.smoke)
        print(json.dumps(results))
        return
    with work_folder(args.smoke, name) as root:
        if args.only != "first":
            if args.smoke:
                from openwebtext.synth import write_corpus

                corpus = str(write_corpus(root / "read", subsets=2, members=3, docs=10).path)
            else:
                from openwebtext.synth import bench_corpus

                corpus = args.corpus or str(bench_corpus())
            results["read"] = measure_read(*split_files(corpus), args)
        if args.only != "read":
            results["first"] = measure_first(root, args)
    line = json.dumps(results)
    if args.json:
        args.json.write_text(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
