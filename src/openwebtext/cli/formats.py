"""``--format`` of ``owt tokenize`` and ``owt merge``: the files another trainer reads,
written beside the finished run (``openwebtext.prepare.write_format``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable

from openwebtext.prepare import Progress, Report, write_format
from openwebtext.source import Storage
from openwebtext.tokenfiles import FORMATS

__all__ = ["add_format", "check_format", "formatted"]

_HELP = (
    "nanogpt (default): train.bin, val.bin; megatron: also train.idx, val.idx (Megatron-LM, "
    "NeMo, GPT-NeoX: --data-path OUT/train); llmc: also train_000000.bin ... (llm.c, "
    "modded-nanogpt); datatrove: also train.ds, train.ds.index (nanotron, "
    "DatatroveFolderDataset). train.bin keeps its bytes in every format"
)


def add_format(parser: argparse.ArgumentParser) -> None:
    """Register ``--format``."""
    parser.add_argument("--format", choices=FORMATS, default="nanogpt", help=_HELP)


def check_format(args: argparse.Namespace, shard: tuple[int, int] | None) -> None:
    """Refuse a format for a slice: the merge of the slices writes it."""
    if shard is not None and args.format != "nanogpt":
        raise ValueError(
            f"--format {args.format} is written for a whole run: give it to owt merge, not to "
            "the --shard runs"
        )


def formatted(
    args: argparse.Namespace,
    report: Report,
    store: Storage | None,
    update: Callable[[Progress], None],
) -> Report:
    """Write ``args.format``'s files beside the run ``report`` made; say what was written."""
    if args.format == "nanogpt":
        return report
    marker = write_format(report.out, args.format, store, progress=update, wait=args.wait)
    if marker is not None and not args.quiet:
        names = list(marker["files"])
        shown = ", ".join(names if len(names) <= 4 else [*names[:2], "...", names[-1]])
        from tqdm import tqdm  # the format's bar is still open: the line goes above it

        tqdm.write(f"{args.format}: {shown} in {report.out}", file=sys.stderr)
    return dataclasses.replace(report, format=args.format)
