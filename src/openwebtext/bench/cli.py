"""The command line: ``owt bench`` (:func:`add_parser`) and ``python -m openwebtext.bench``
(:func:`main`, with the children's subcommands)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from openwebtext import OWTError
from openwebtext.bench.children import ceiling_one, run_one
from openwebtext.bench.common import BenchError
from openwebtext.bench.report import summary_text
from openwebtext.bench.runner import run_bench
from openwebtext.bench.runs import Settings
from openwebtext.engine import cpu_count
from openwebtext.files import named, print_out
from openwebtext.index import refuse_corpus_folder
from openwebtext.interrupts import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from openwebtext.interrupts import check, exit_code, interruptible
from openwebtext.options import option_type
from openwebtext.source import add_storage_options, add_text_column


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return value



def _command(text: str) -> str:
    """``--vs``: a shell command, never an empty one (it would be timed as a run)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty command: give the command to time")
    return text


def _worker_counts(text: str) -> tuple[int, ...]:
    try:
        counts = {_positive_int(part) for part in text.split(",") if part.strip()}
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of counts: {text}") from exc
    if not counts:
        raise argparse.ArgumentTypeError("no worker count given")
    return tuple(sorted(counts))


def default_workers(cores: int) -> tuple[int, ...]:
    """Powers of two below the core count, the core count, and twice it (oversubscribed)."""
    counts = {1 << k for k in range(cores.bit_length()) if 1 << k < cores}
    return tuple(sorted(counts | {cores, 2 * cores}))


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``bench`` subcommand (its ``run`` returns an exit code)."""
    cores = cpu_count()
    defaults = default_workers(cores)
    p = subparsers.add_parser(
        "bench",
        help="time the loader against worker count, next to the decompression ceiling",
        description="Time the loader for each worker count (fresh processes, warm-up, "
        "repeats), next to the decompression ceiling and any --vs command; write "
        "timings.csv, bench.json and scaling.png. No path: the built-in bench corpus "
        "(335 MB of text, generated once).",
    )
    p.add_argument("paths", nargs="*", type=named("path"), help="files, folders or glob patterns")
    p.add_argument(
        "--workers",
        type=_worker_counts,
        default=defaults,
        help=f"comma-separated worker counts (default: {','.join(map(str, defaults))})",
    )
    p.add_argument(
        "--repeat", type=_positive_int, default=3, help="measured runs, median kept (default 3)"
    )
    p.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=1,
        help="rounds run first and discarded (default 1)",
    )
    p.add_argument(
        "--take",
        type=_positive_int,
        default=None,
        help="stop after N documents (default: the whole corpus)",
    )
    p.add_argument(
        "--seed", type=option_type("seed"), default=0, help="the loader's seed (default 0)"
    )
    p.add_argument(
        "--out", type=lambda text: Path(named("folder")(text)), default=Path("bench-out"),
        help="output folder (default bench-out)",
    )
    p.add_argument(
        "--vs",
        type=_command,
        action="append",
        default=[],
        metavar="COMMAND",
        help="another loader's shell command, timed alike; {workers} and {paths} are "
        "replaced (e.g. 'python main.py -j {workers} {paths}'); repeatable",
    )
    p.add_argument(
        "--timeout", type=_positive_float, default=600.0, help="seconds per run (default 600)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    add_storage_options(p)
    add_text_column(p)
    p.set_defaults(run=_bench)


def _bench(args: argparse.Namespace) -> int:
    try:
        refuse_corpus_folder(str(args.out))
    except ValueError as exc:
        print(f"owt: error: {exc}", file=sys.stderr)
        return 2
    settings = Settings(
        paths=tuple(args.paths),
        workers=args.workers,
        repeat=args.repeat,
        warmup=args.warmup,
        take=args.take,
        seed=args.seed,
        out=args.out,
        vs=tuple(args.vs),
        timeout=args.timeout,
        progress=not args.quiet,
        storage_options=dict(args.storage_options),
        cache_dir=args.cache_dir,
        cache_size=args.cache_size,
        text_column=args.text_column,
    )
    try:
        result = run_bench(settings)
    except (OWTError, BenchError) as exc:
        print(f"owt: error: {exc}", file=sys.stderr)
        return 1
    print_out(summary_text(result))
    return 0


def _child_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    one = sub.add_parser("run-one", help="(internal) stream once with the loader")
    one.add_argument("--take", type=_positive_int, default=None)
    ceiling = sub.add_parser("ceiling-one", help="(internal) only decompress the members")
    ceiling.add_argument("--units", type=_positive_int, default=None)
    for p, run in ((one, run_one), (ceiling, ceiling_one)):
        # Storage options come through STORAGE_ENV, not argv (credentials).
        p.add_argument("--cache-dir", default=None)
        p.add_argument("--cache-size", type=int, default=None)
        p.add_argument("--workers", type=_positive_int, required=True)
        p.add_argument("--seed", type=int, default=0)
        add_text_column(p)
        p.add_argument("paths", nargs="+")
        p.set_defaults(run=run)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m openwebtext.bench bench ...`` (as ``owt bench``), and the children."""
    parser = argparse.ArgumentParser(prog="python -m openwebtext.bench")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    _child_parsers(sub)
    with interruptible():
        args = parser.parse_args(argv)
        try:
            code: int = args.run(args)
            check()  # (a signal whose exception something swallowed: ``interrupts``)
            return code
        except KeyboardInterrupt as interrupt:
            print("interrupted", file=sys.stderr)
            return exit_code(interrupt)
