"""What generating the synthetic corpus costs: CPU per document by stage, and the default corpus.

Usage: python benchmarks/bench_synth.py [--docs 1170] [--repeat 3] [-j 2] [--skip-corpus]
       [--old REV] [--presets 1,4,5]

- Per document, in one fresh process, after the vocabulary is built (its build time is
  shown apart): generate (``member_documents``), xz (``lzma`` preset 6 of each member's
  inner tar, as the packer calls it) and the whole member as ``write_corpus`` makes it with
  one worker (generate, tar, xz, write). The members are those of subset 0, seed 0.
- The default corpus (3 x 60 x 390, seed 0) written with ``--jobs`` processes into a
  temporary folder: wall and CPU seconds of the process tree, and whether its bytes are the
  ones the original generator wrote (sha256 of the three tars; xz's output can differ
  between liblzma builds, so a "no" with equal text is the encoder, not the generator).
- ``--old REV``: the per-document figures of the generator at git revision REV as well
  (that revision's ``src/`` in a temporary folder; costs about as much as the new ones).

Other processes' load during the run is printed: on a shared machine, read the CPU
seconds, not the wall time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import math
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from common import OtherLoad, cpu_model

# A child run with --old imports these from that revision's src/ (its PYTHONPATH).
from openwebtext import synth
from openwebtext.bench import run_child

DOCS_PER_MEMBER = 390
DEFAULT_DOCUMENTS = synth.DEFAULT_SUBSETS * synth.DEFAULT_MEMBERS * synth.DEFAULT_DOCS
# sha256 of the default corpus' tars as the generator wrote them before it was made faster
# (commit c3d3b59, liblzma 5.4.1).
ORIGINAL_TARS = {
    "urlsf_subset00.tar": "748c02a847cee9a1c8f1d36d28cd09e6a36b8ccfe3077346530ced43ee01fc7b",
    "urlsf_subset01.tar": "661cccae9287209968e066d235fc4442a398678458995f6828b0f5a8cdc90987",
    "urlsf_subset02.tar": "3cca384ca8c3302109c3d313062f30a9c30ab5b1ccc95dfac36ab9d0c39e12c1",
}
REPO = Path(__file__).resolve().parent.parent


def _inner_tars(corpus: Path) -> list[bytes]:
    """The decompressed members of subset 0 of ``corpus``."""
    inner = []
    with tarfile.open(corpus / "urlsf_subset00.tar") as outer:
        for info in outer.getmembers():
            fh = outer.extractfile(info)
            assert fh is not None
            inner.append(lzma.decompress(fh.read()))
    return inner


def per_document(docs: int, repeat: int, presets: list[int]) -> dict[str, Any]:
    """In this process: CPU milliseconds per document of each stage (the least of ``repeat``
    rounds), over ``docs`` rounded up to whole members; and xz at other ``presets``."""
    members = max(1, math.ceil(docs / DOCS_PER_MEMBER))
    n = members * DOCS_PER_MEMBER
    clock = time.process_time
    start = clock()
    synth.member_documents(0, 0, 1, 1)  # builds the vocabulary (once per process)
    vocabulary_s = clock() - start
    generate, member, xz = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            start = clock()
            for k in range(1, members + 1):
                synth.member_documents(0, 0, k, DOCS_PER_MEMBER)
            generate.append(clock() - start)
            start = clock()
            synth.write_corpus(Path(tmp) / str(r), 1, members, DOCS_PER_MEMBER, workers=1)
            member.append(clock() - start)
        inner = _inner_tars(Path(tmp) / "0")
        for _ in range(repeat):
            start = clock()
            for tar in inner:
                lzma.compress(tar, format=lzma.FORMAT_XZ, preset=6)
            xz.append(clock() - start)
    other_presets = {}
    for preset in presets:
        start = clock()
        size = sum(len(lzma.compress(tar, format=lzma.FORMAT_XZ, preset=preset)) for tar in inner)
        other_presets[str(preset)] = {
            "xz_ms": (clock() - start) / n * 1e3,
            "ratio": sum(len(tar) for tar in inner) / size,  # tar headers included
        }
    return {
        "module": synth.__file__,
        "documents": n,
        "vocabulary_s": vocabulary_s,
        "generate_ms": min(generate) / n * 1e3,
        "xz_ms": min(xz) / n * 1e3,
        "member_ms": min(member) / n * 1e3,
        "presets": other_presets,
    }


def default_corpus(jobs: int, out: Path) -> dict[str, Any]:
    """In this process: write the default corpus' shape into ``out`` with ``jobs`` workers."""
    start = time.perf_counter()
    report = synth.write_corpus(
        out, synth.DEFAULT_SUBSETS, synth.DEFAULT_MEMBERS, synth.DEFAULT_DOCS, workers=jobs
    )
    seconds = time.perf_counter() - start
    tars = {}
    for name in ORIGINAL_TARS:
        digest = hashlib.sha256()
        with open(out / name, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        tars[name] = digest.hexdigest()
    return {
        "seconds": seconds,
        "documents": report.documents,
        "text_mb": report.text_bytes / 1e6,
        "xz_mb": report.compressed_bytes / 1e6,
        "same_bytes": tars == ORIGINAL_TARS,
    }


def child(kind: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this script's ``--child KIND`` in a fresh process group; its JSON, wall and CPU."""
    done = run_child([sys.executable, __file__, "--child", kind, *args], timeout=3600, env=env)
    if done.exit_code != 0:
        sys.exit(f"{kind} failed ({done.status}, {done.exit_code}): {done.stderr_tail}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "wall_s": done.wall_s, "cpu_s": done.cpu_s}


def old_source(rev: str, into: Path) -> Path:
    """``src/`` of git revision ``rev`` of this repository, extracted into ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def print_per_document(name: str, r: dict[str, Any]) -> None:
    other = r["member_ms"] - r["generate_ms"] - r["xz_ms"]
    print(
        f"{name:>4}: {r['member_ms']:.3f} ms of CPU per document: generate "
        f"{r['generate_ms']:.3f}, xz {r['xz_ms']:.3f}, tar and write {other:.3f} "
        f"({r['documents']} documents; vocabulary built in {r['vocabulary_s']:.2f} s)"
    )


def print_presets(r: dict[str, Any], jobs: int) -> None:
    """What the default corpus would cost at other xz presets (other bytes: a new version)."""
    rest = r["member_ms"] - r["xz_ms"]
    documents = DEFAULT_DOCUMENTS
    for preset, p in r["presets"].items():
        seconds = documents * (rest + p["xz_ms"]) / 1e3
        print(
            f"  preset {preset}: xz {p['xz_ms']:.3f} ms per document, inner tar / xz "
            f"{p['ratio']:.2f}; default corpus about {seconds:.0f} CPU s, "
            f"{seconds / jobs:.0f} s on {jobs} idle cores"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3 * DOCS_PER_MEMBER, help="documents timed")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the least CPU counts")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="processes for the corpus")
    parser.add_argument("--skip-corpus", action="store_true", help="per-document figures only")
    parser.add_argument("--old", metavar="REV", help="also time the generator at git REV")
    parser.add_argument(
        "--presets", default="", help="also time xz at these presets, e.g. 1,4,5 (other bytes)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    presets = [int(p) for p in args.presets.split(",") if p]
    if args.child == "per-document":
        print(json.dumps(per_document(args.docs, args.repeat, presets)))
        return
    if args.child == "corpus":
        print(json.dumps(default_corpus(args.jobs, Path(args.out))))
        return

    load = OtherLoad()
    print(f"CPU: {cpu_model()}; {len(os.sched_getaffinity(0))} usable cores")
    timing = ["--docs", str(args.docs), "--repeat", str(args.repeat)]
    results = {"new": child("per-document", [*timing, "--presets", args.presets])}
    if args.old:
        with tempfile.TemporaryDirectory() as tmp:
            src = old_source(args.old, Path(tmp))
            env = {"PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
            results["old"] = child("per-document", timing, env)
            if not results["old"]["module"].startswith(str(src)):
                sys.exit(f"--old ran {results['old']['module']}, not {src}")
    for name, r in results.items():
        print_per_document(name, r)
    if "old" in results:
        ratio = results["old"]["generate_ms"] / results["new"]["generate_ms"]
        whole = results["old"]["member_ms"] / results["new"]["member_ms"]
        print(f"new vs old, CPU: generation {ratio:.2f}x less, whole member {whole:.2f}x less")
    if presets:
        print_presets(results["new"], args.jobs)
    if not args.skip_corpus:
        with tempfile.TemporaryDirectory() as tmp:
            c = child("corpus", ["--jobs", str(args.jobs), "--out", str(Path(tmp) / "c")])
        print(
            f"default corpus, -j {args.jobs}: {c['wall_s']:.1f} s wall, {c['cpu_s']:.1f} s CPU "
            f"({c['cpu_s'] / c['documents'] * 1e3:.2f} ms per document); {c['documents']} "
            f"documents, {c['text_mb']:.1f} MB of text, {c['xz_mb']:.1f} MB of xz; same bytes "
            f"as the original generator: {'yes' if c['same_bytes'] else 'NO'}"
        )
    seconds, other, stolen = load.measure()
    print(f"{seconds:.0f} s in all; meanwhile other processes kept {other:.2f} cores busy", end="")
    print(f" ({stolen:.2f} stolen): with others busy, read the CPU seconds, not the wall time")


if __name__ == "__main__":
    main()
