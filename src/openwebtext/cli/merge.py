"""``owt merge``: join the slices of ``owt tokenize --shard i/n`` into the files one run
would have written (``openwebtext.prepare.merge``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from openwebtext.cli.args import Subparsers, add_quiet, add_wait
from openwebtext.cli.formats import add_format, formatted
from openwebtext.cli.prepared import with_progress
from openwebtext.files import named
from openwebtext.prepare import Progress, Report
from openwebtext.source import add_storage_option, configure

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """Join the slices of ``owt tokenize --shard i/n`` (see ``openwebtext.prepare.merge``)."""
    from openwebtext.prepare import merge

    if args.storage_options:
        configure(dict(args.storage_options))

    def work(update: Callable[[Progress], None]) -> Report:
        report = merge(
            args.slices,
            args.out,
            restart=args.restart,
            progress=update,
            checkpoint_seconds=args.checkpoint_seconds,
            verify=not args.no_verify,
            wait=args.wait,
        )
        return formatted(args, report, None, update)

    return with_progress(work, args.quiet)


def add_parser(sub: Subparsers) -> None:
    """Register ``owt merge``."""
    merge = sub.add_parser(
        "merge",
        help="join the slices of owt tokenize --shard into train.bin and val.bin",
        description="Join the folders written by `owt tokenize --shard i/n` (every i, same "
        "corpus and options) into the train.bin, val.bin and meta.json one run would have "
        "written, byte for byte. Resumable as owt tokenize is.",
    )
    merge.add_argument(
        "slices", nargs="+", metavar="DIR", type=named("folder or a URL"),
        help="slice folders or URLs, in any order",
    )
    merge.add_argument(
        "--out", required=True, type=named("folder or a URL"), help="output folder, or URL"
    )
    add_storage_option(merge)
    merge.add_argument(
        "--restart", action="store_true", help="throw away the progress recorded in OUT"
    )
    merge.add_argument(
        "--no-verify",
        action="store_true",
        help="do not check each slice's files against the sha256 in its meta.json (the check "
        "reads every slice once more, about 30 s for the 17 GB of a full GPT-2 run); sizes "
        "are checked either way",
    )
    add_format(merge)
    add_wait(merge)
    merge.add_argument("--checkpoint-seconds", type=float, default=2.0, help=argparse.SUPPRESS)
    add_quiet(merge)
    merge.set_defaults(run=run)
