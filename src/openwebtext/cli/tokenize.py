"""``owt tokenize``: nanoGPT's ``train.bin`` / ``val.bin`` through ``openwebtext.prepare``
(worker processes here) or ``openwebtext.ray`` (``--engine ray``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from openwebtext.cli.args import (
    Subparsers,
    add_jobs,
    add_on_error,
    add_paths,
    add_quiet,
    add_text_column,
    add_wait,
    at_least,
    open_corpus,
    option_type,
    parse_shard,
    tokenizer_spec,
)
from openwebtext.cli.formats import add_format, check_format, formatted
from openwebtext.cli.prepared import with_progress
from openwebtext.errors import install_hint
from openwebtext.files import named
from openwebtext.index import Corpus, refuse_corpus_folder
from openwebtext.options import NANOGPT_SPLIT
from openwebtext.prepare import Progress, Report
from openwebtext.source import add_storage_options

__all__ = ["add_parser", "run"]

_DESCRIPTION = (
    "Tokenize every document in the workers and write its ids, then the\n"
    "end-of-text id, to OUT/train.bin or OUT/val.bin (flat arrays of the tokenizer's dtype:\n"
    "uint16 for gpt2; read with numpy.memmap), and OUT/meta.json (options, counts, sha256\n"
    "of each file). No path: the built-in generated corpus.\n\n"
    "Split rules (--split):\n"
    "  hash     (default) a document is held out when a keyed hash of its name is below\n"
    "           --val-fraction (key --val-seed), as `owt stream --split val`; members in\n"
    "           the order of --seed (or corpus order with --no-shuffle).\n"
    "  nanogpt  byte-identical to nanoGPT's data/openwebtext/prepare.py over the same\n"
    "           archives through the Hugging Face loading script: its text normalisation,\n"
    f"           train_test_split(test_size={NANOGPT_SPLIT.fraction}, seed={NANOGPT_SPLIT.seed}) "
    "and its file order.\n\n"
    "Interrupted (Ctrl-C, SIGTERM, SIGKILL, power loss)? Run the same command again: it goes\n"
    "on from the progress recorded in OUT (--restart starts over). Across machines: run\n"
    "--shard i/n for every i into separate folders, then `owt merge`. OUT may be a URL\n"
    "(s3://bucket/prefix/): the files are built in a local staging folder under TMPDIR\n"
    "and uploaded when finished, meta.json last; --storage-option applies to it too."
)


def run(args: argparse.Namespace) -> int:
    """Write nanoGPT-style ``train.bin`` / ``val.bin`` (see ``openwebtext.prepare``)."""
    from openwebtext.prepare import PrepareOptions

    if args.split == "nanogpt" and (args.seed is not None or not args.shuffle):
        order = "--seed" if args.seed is not None else "--no-shuffle"
        raise ValueError(f"{order} orders --split hash's members; nanogpt's order is nanoGPT's: "
                         f"leave {order} out")  # fmt: skip
    if args.seed is not None and not args.shuffle:  # (as owt stream refuses it)
        raise ValueError("--seed orders the members; --no-shuffle keeps corpus order: give one")
    args.seed = 0 if args.seed is None else args.seed
    options = PrepareOptions(
        split_rule=args.split,
        tokenizer=args.tokenizer,
        workers=args.jobs,
        seed=args.seed,
        shuffle=args.shuffle,
        val_fraction=args.val_fraction,
        val_seed=args.val_seed,
        take=args.take,
        on_error=args.on_error,
    )
    shard = parse_shard(args.shard)
    check_format(args, shard)
    ray = {"--address": args.address is not None, "--units-per-task": args.units_per_task}
    given = [flag for flag, value in ray.items() if value]
    if args.engine != "ray" and given:
        raise ValueError(f"{', '.join(given)} is --engine ray's: give --engine ray, or leave "
                         "it out")  # fmt: skip
    args.units_per_task = args.units_per_task or 16
    corpus = open_corpus(args)
    refuse_corpus_folder(args.out, corpus.units)  # (before a Ray cluster starts; prepare too)

    def work(update: Callable[[Progress], None]) -> Report:
        if args.engine == "ray":
            report = _tokenize_on_ray(args, corpus, options, shard, update)
        else:
            report = _tokenize_here(args, corpus, options, shard, update)
        return formatted(args, report, corpus.storage, update)

    return with_progress(work, args.quiet)


def _tokenize_here(
    args: argparse.Namespace,
    corpus: Corpus,
    options: Any,
    shard: tuple[int, int] | None,
    update: Callable[[Progress], None],
) -> Report:
    """The local engine: ``prepare`` with worker processes here."""
    from openwebtext.prepare import prepare

    return prepare(
        corpus,
        args.out,
        options,
        shard=shard,
        restart=args.restart,
        progress=update,
        checkpoint_seconds=args.checkpoint_seconds,
        wait=args.wait,
    )


def _tokenize_on_ray(
    args: argparse.Namespace,
    corpus: Corpus,
    options: Any,
    shard: tuple[int, int] | None,
    update: Callable[[Progress], None],
) -> Report:
    """``--engine ray``: slices as Ray tasks, then the merge (see ``openwebtext.ray``)."""
    from openwebtext.ray import tokenize

    if shard is not None:
        raise ValueError("--shard is for the local engine: --engine ray makes its own slices")
    return tokenize(
        corpus,
        args.out,
        options,
        address=args.address,
        num_cpus=args.jobs,
        units_per_task=args.units_per_task,
        restart=args.restart,
        progress=update,
        checkpoint_seconds=args.checkpoint_seconds,
        storage_options=dict(getattr(args, "storage_options", None) or []) or None,
        wait=args.wait,
    )


def add_parser(sub: Subparsers) -> None:
    """Register ``owt tokenize``."""
    tokenize = sub.add_parser(
        "tokenize",
        help="write train.bin and val.bin of token ids, as nanoGPT's prepare.py does",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_DESCRIPTION,
    )
    add_paths(tokenize)
    add_storage_options(tokenize)
    add_text_column(tokenize)
    tokenize.add_argument(
        "--out",
        required=True,
        type=named("folder or a URL"),
        help="output folder, or URL (s3://bucket/prefix/, any fsspec URL)",
    )
    tokenize.add_argument(
        "--split",
        choices=("hash", "nanogpt"),
        default="hash",
        help="hash (default): keyed hash of each document's name; nanogpt: nanoGPT's exact files",
    )
    tokenize.add_argument(
        "--tokenizer",
        type=tokenizer_spec,
        default="gpt2",
        help="gpt2 (offline), bytes, tiktoken:NAME or hf:PATH (default gpt2)",
    )
    add_jobs(tokenize)
    tokenize.add_argument(
        "--seed", type=option_type("seed"), default=None, help="hash: member order (default 0)"
    )
    tokenize.add_argument(
        "--no-shuffle", dest="shuffle", action="store_false", help="hash: corpus order"
    )
    tokenize.add_argument(
        "--val-fraction",
        type=option_type("val_fraction", float),
        default=NANOGPT_SPLIT.fraction,
        help=f"held-out share (default {NANOGPT_SPLIT.fraction})",
    )
    tokenize.add_argument(
        "--val-seed",
        type=option_type("val_seed"),
        default=NANOGPT_SPLIT.seed,
        help=f"hash key / nanogpt permutation seed (default {NANOGPT_SPLIT.seed})",
    )
    tokenize.add_argument(
        "--take", type=option_type("take"), default=None, help="stop after N documents"
    )
    add_on_error(tokenize)
    add_format(tokenize)
    tokenize.add_argument(
        "--shard",
        metavar="I/N",
        help="prepare slice I of N of the members into OUT; join the slices with owt merge",
    )
    tokenize.add_argument(
        "--restart", action="store_true", help="throw away the progress recorded in OUT"
    )
    add_wait(tokenize)
    tokenize.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help=f"local: worker processes here; ray: Ray tasks ({install_hint('ray')}) "
        "(default local)",
    )
    tokenize.add_argument(
        "--address",
        default=None,
        help="with --engine ray: the Ray cluster (default: start a local instance of -j CPUs)",
    )
    tokenize.add_argument(
        "--units-per-task",
        type=at_least(1),
        default=None,
        help="with --engine ray: members per Ray task (default 16; keep it to resume)",
    )
    tokenize.add_argument("--checkpoint-seconds", type=float, default=2.0, help=argparse.SUPPRESS)
    add_quiet(tokenize)
    tokenize.set_defaults(run=run)
