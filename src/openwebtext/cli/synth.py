"""``owt synth``: write a generated corpus in the OpenWebText layout
(``openwebtext.synth.write_corpus``) and say what it wrote."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from openwebtext.cli.args import Subparsers, add_quiet
from openwebtext.synth import write_corpus

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """``owt synth``: write the corpus, then one line of its sizes."""
    report = write_corpus(
        Path(args.out),
        subsets=args.subsets,
        members=args.members,
        docs=args.docs,
        seed=args.seed,
        workers=args.jobs,
        progress=not args.quiet,
    )
    print(
        f"wrote {report.documents} documents in {report.subsets} subsets x {report.members} "
        f"members to {report.path}: {report.text_bytes / 1e6:.1f} MB of text, "
        f"{report.compressed_bytes / 1e6:.1f} MB compressed "
        f"({report.text_bytes / max(1, report.compressed_bytes):.2f}x), {report.seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


def add_parser(sub: Subparsers) -> None:
    """Register ``owt synth``."""
    synth = sub.add_parser("synth", help="write a generated corpus in the OpenWebText layout")
    synth.add_argument("out", help="output folder (must not exist or be empty)")
    synth.add_argument("--subsets", type=int, default=3)
    synth.add_argument("--members", type=int, default=60)
    synth.add_argument("--docs", type=int, default=390)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("-j", "--jobs", type=int, default=None, help="processes (default: all CPUs)")
    add_quiet(synth, help=None)
    synth.set_defaults(run=run)
