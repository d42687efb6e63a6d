"""What resuming costs: the time to the first document after a cut, against reading the epoch.

Reads a whole epoch once (timing it), takes a state at 90% of it, then resumes
from that state in a fresh iterator and times (a) the first document after the
cut, (b) the rest of the epoch, and counts the units the resumed run read.
Only the cut block's units are read again, so (a) is about one shuffle block's
worth of decompression, whatever the size of the corpus.

Usage: python benchmarks/bench_resume.py [CORPUS] [--workers 2] [--at 0.9]
"""

from __future__ import annotations

import argparse
import time

from openwebtext import Corpus, Loader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--at", type=float, default=0.9, help="where to cut, as a share")
    args = parser.parse_args()
    if args.corpus is None:
        from openwebtext.synth import bench_corpus

        args.corpus = str(bench_corpus())
    loader = Loader(Corpus.open(args.corpus), workers=args.workers, seed=0)

    start = time.perf_counter()
    with loader.iter() as it:
        total = sum(1 for _ in it)
    epoch_s = time.perf_counter() - start

    cut = int(total * args.at)
    with loader.replace(take=cut).iter() as it:
        for _ in it:
            pass
        state = it.state_dict()

    start = time.perf_counter()
    with loader.iter(state=state) as it:
        next(it)
        first_s = time.perf_counter() - start
        rest = 1 + sum(1 for _ in it)
        rest_s = time.perf_counter() - start
        reread = it.stats.units - state["counters"].get("units", 0)
    units = len(loader.corpus.units)
    block = state["position"]["block"]
    print(f"epoch: {total} documents, {units} units, {epoch_s:.2f} s")
    print(f"cut at {cut} documents ({args.at:.0%}); state {state['position']}")
    print(f"resume -> first document: {first_s:.3f} s = {first_s / epoch_s:.1%} of the epoch")
    print(
        f"resume -> end of epoch: {rest_s:.2f} s for {rest} documents "
        f"({rest_s / epoch_s:.1%} of the epoch for {rest / total:.1%} of its documents)"
    )
    print(
        f"units read by the resumed run: {reread}: plan positions {block}..{units - 1}, "
        f"the cut block's again and then the rest; the {block} before it are not read"
    )


if __name__ == "__main__":
    main()
