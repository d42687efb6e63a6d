"""Why the tar walk is hand-written: its cost per document against tarfile's, on real members.

Usage: python benchmarks/bench_tarwalk.py [CORPUS] [--members 20]
Decompresses a few members once, then times, per document:
- tarfile: open the in-memory inner tar, iterate, extractfile().read() (what the reference did);
- walk: openwebtext.tarwalk.walk (names, offsets, sizes; checksums verified) plus slicing.
and, as the scale that matters, the lzma decompression of the same members.
"""

from __future__ import annotations

import argparse
import io
import os
import tarfile
import time

from openwebtext import Corpus
from openwebtext.formats import decompress
from openwebtext.tarwalk import walk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?")
    parser.add_argument("--members", type=int, default=20)
    args = parser.parse_args()
    if args.corpus is None:
        from openwebtext.synth import bench_corpus

        args.corpus = str(bench_corpus())
    units = Corpus.open(args.corpus).units[: args.members]
    raws = []
    for u in units:
        with open(u.path, "rb") as f:
            raws.append((os.pread(f.fileno(), u.size, u.offset), u.kind))
    start = time.perf_counter()
    members = [decompress(raw, kind, 1 << 40) for raw, kind in raws]
    t_lzma = time.perf_counter() - start
    documents = 0
    start = time.perf_counter()
    for data in members:
        names, offsets, sizes = walk(data)
        for offset, size in zip(offsets, sizes, strict=True):
            data[offset : offset + size]
        documents += len(names)
    t_walk = time.perf_counter() - start
    start = time.perf_counter()
    for data in members:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for info in tar:
                tar.extractfile(info).read()  # type: ignore[union-attr]
    t_tarfile = time.perf_counter() - start
    print(f"{documents} documents in {len(members)} members")
    for name, seconds in (("lzma decompress", t_lzma), ("tarfile", t_tarfile), ("walk", t_walk)):
        print(f"{name:>16}: {seconds / documents * 1e6:6.2f} µs/document")
    print(f"walk costs {t_walk / t_lzma:.1%} of decompression; tarfile {t_tarfile / t_lzma:.1%}")


if __name__ == "__main__":
    main()
