"""Loader throughput as a ratio to the decompression ceiling, measured in one run.

A thin wrapper over ``owt bench`` (``openwebtext.bench``), kept for its old arguments. For
each worker count it times, as fresh processes, after a warm-up, interleaved and repeated:
the loader, the ceiling (processes that only decompress the same members) and, with
``--reference``, the seed's ``main.py`` on the same corpus folder.

Usage: python benchmarks/bench_loader.py [CORPUS] [--workers 1,2] [--repeat 3] [--reference]
           [--json FILE] [--out DIR]
With no corpus, the built-in generated one (335 MB of text) is made once and used.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from openwebtext import bench

SEED_MAIN = Path(__file__).resolve().parents[2] / "shared" / "seed" / "main.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", help="corpus folder (default: the generated one)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", default="3")
    parser.add_argument("--reference", action="store_true", help="also time the seed's main.py")
    parser.add_argument("--json", type=Path, help="also copy bench.json here")
    parser.add_argument("--out", default="bench-out", help="folder for the results")
    args = parser.parse_args()
    argv = ["bench", *([args.corpus] if args.corpus else [])]
    argv += ["--workers", args.workers, "--repeat", args.repeat, "--out", args.out]
    if args.reference and SEED_MAIN.exists():
        python = shlex.quote(sys.executable)
        argv += ["--vs", f"{python} {shlex.quote(str(SEED_MAIN))} -j {{workers}} {{paths}}"]
    code = bench.main(argv)
    if code == 0 and args.json:
        shutil.copyfile(Path(args.out) / "bench.json", args.json)
    return code


if __name__ == "__main__":
    sys.exit(main())
