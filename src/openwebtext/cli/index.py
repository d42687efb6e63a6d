"""``owt index``: count the documents of every member once (and of each held-out split),
saved beside the corpus for even sharding and the progress bar's totals."""

from __future__ import annotations

import argparse
import sys

from openwebtext.cli.args import (
    Subparsers,
    add_jobs,
    add_on_error,
    add_paths,
    add_quiet,
    add_text_column,
    open_corpus,
    option_type,
    plural,
)
from openwebtext.errors import OWTError, TruncatedMember
from openwebtext.index import split_key
from openwebtext.options import NANOGPT_SPLIT
from openwebtext.source import add_storage_options
from openwebtext.stream import count_documents

__all__ = ["add_parser", "run"]


def run(args: argparse.Namespace) -> int:
    """``owt index``: count, save the counts, say what was skipped."""
    from tqdm import tqdm

    corpus = open_corpus(args)
    fractions = args.val_fraction or [NANOGPT_SPLIT.fraction]
    splits = tuple(dict.fromkeys((fraction, args.val_seed) for fraction in fractions))
    known = None if args.force else corpus.counts
    again = known if known is not None and known.unsure else None  # (read those again)
    if known is not None:
        missing = tuple(split for split in splits if split_key(*split) not in known.val)
        if missing and again is not None:  # (one count at a time: all of it)
            known = again = None
        elif not missing and again is not None:
            print(f"indexed, but {plural(len(again.unsure), 'member')} could not be read for "
                  "a cause that is not their bytes: reading them again", file=sys.stderr)
        elif not missing:
            print(
                f"already indexed: {plural(sum(known.documents), 'document')} in "
                f"{plural(len(corpus.units), 'member')} ({corpus.counts_paths()[0].name})",
                file=sys.stderr,
            )
            return 0
        if missing and known is not None:
            said = ", ".join(f"--val-fraction {f} --val-seed {s}" for f, s in missing)
            what = "split" if len(missing) == 1 else "splits"
            print(f"indexed, but not the held-out {what} of {said}: counting now",
                  file=sys.stderr)  # fmt: skip
            splits = missing
    skipped: list[OWTError] = []
    with tqdm(total=len(corpus.units), unit="member", disable=args.quiet, file=sys.stderr) as bar:
        counts = count_documents(
            corpus,
            workers=args.jobs,
            splits=splits,
            progress=bar.update,
            on_error=args.on_error,
            on_skip=skipped.append,
            again=again,
        )
    if known is not None and again is None:  # the splits counted before
        counts = known.joined(counts)
    members = plural(len(corpus.units), "member")
    counted = f"{plural(sum(counts.documents), 'document')} in {members}"
    print(f"{counted}; counts in {corpus.save_counts(counts)}", file=sys.stderr)
    if counts.unsure:  # a read error, a limit, a worker's death: no fact of the corpus
        print(f"{plural(len(counts.unsure), 'member')} could not be read for a cause that is "
              "not their bytes (below): the next count reads them again", file=sys.stderr)
    if skipped:
        cut = sum(isinstance(e, TruncatedMember) for e in skipped)
        # Counted as a stream under --on-error skip reads them; a stream meets them again
        # under its own --on-error.
        print(
            f"skipped {plural(len(skipped) - cut, 'member')}; {plural(cut, 'member')} cut short "
            "(their documents before the cut counted)",
            file=sys.stderr,
        )
        for error in skipped[:20]:
            print(f"  skipped: {error}", file=sys.stderr)
    if corpus.skipped_files:
        files = plural(len(corpus.skipped_files), "file")
        print(f"skipped {files} (not read at all; counts written for the rest)", file=sys.stderr)
        for error in corpus.skipped_files[:20]:
            print(f"  skipped: {error}", file=sys.stderr)
    return 0


def add_parser(sub: Subparsers) -> None:
    """Register ``owt index``."""
    index = sub.add_parser(
        "index",
        help="count the documents of every member once (needed for even sharding)",
        description="Count the documents of every member, and those of each held-out split, "
        "once, and save the counts beside the corpus (in the cache folder for URLs, or where "
        "the corpus's folder cannot be written): `owt stream --world-size N` (its even "
        "shares) needs them. A corpus indexed before has only the held-out splits it lacks "
        "counted (and kept with the others). Counts made before a file changed are not used; "
        "--force counts again anyway. No path: the built-in generated corpus.",
    )
    add_paths(index)
    add_storage_options(index)
    add_text_column(index)
    add_jobs(index)
    index.add_argument(
        "--val-fraction",
        type=option_type("val_fraction", float),
        action="append",
        default=None,
        help=f"also count this held-out split (default {NANOGPT_SPLIT.fraction}; repeatable)",
    )
    index.add_argument(
        "--val-seed",
        type=option_type("val_seed"),
        default=NANOGPT_SPLIT.seed,
        help=f"the key of the held-out split's hash (default {NANOGPT_SPLIT.seed})",
    )
    index.add_argument("--force", action="store_true", help="count again even if cached")
    add_on_error(index)
    add_quiet(index)
    index.set_defaults(run=run)
