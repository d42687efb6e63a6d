"""A parquet row group of pyarrow's defaults (a dictionary) against the same rows plain.

Usage: python benchmarks/bench_parquet_dictionary.py [--rows 1000000 4000000] [--out DIR]
Writes one row group of N short documents twice (pyarrow's default dictionary encoding, and
``use_dictionary=False``), then times reading each whole through a ``Loader`` in this process
(``workers=0``). The plain file is the reference, measured in the same run: a dictionary's
column is decoded in batches bounded by its widest page (``engine/pages.py``); sized by the
whole chunk (session 32 and before), their number grew with the chunk and the ratio with N
(2.2x at 1 M rows, 3.9x at 4 M on these machines; now 0.8-0.9x at both: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from openwebtext import Loader


def _write(path: Path, rows: int, dictionary: bool) -> Path:
    table = pa.table({"text": [f"doc {i} hello world" for i in range(rows)]})
    pq.write_table(table, path, row_group_size=rows, use_dictionary=dictionary)
    return path


def _read(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    with Loader(path, workers=0, shuffle=False).iter() as documents:
        count = sum(1 for _ in documents)
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--out", type=Path, default=None, help="folder for the files (a temp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        out = args.out or Path(temp)
        out.mkdir(parents=True, exist_ok=True)
        for rows in args.rows:
            plain, plain_n = _read(_write(out / f"plain{rows}.parquet", rows, False))
            coded, coded_n = _read(_write(out / f"dictionary{rows}.parquet", rows, True))
            assert plain_n == coded_n == rows, (plain_n, coded_n, rows)
            print(f"{rows:>10,} rows: plain {plain:6.2f} s, dictionary {coded:6.2f} s: "
                  f"{coded / plain:.2f}x the plain read")  # fmt: skip


if __name__ == "__main__":
    main()
