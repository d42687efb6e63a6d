"""The ``owt`` command: parses arguments, calls the library, prints. No logic of its own."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .corpus import Corpus
from .errors import OWTError
from .loader import DocumentIterator
from .options import Options
from .workers import cpu_count

__all__ = ["main"]

EXIT_INTERRUPTED = 130


def _corpus_paths(paths: Sequence[str]) -> list[str]:
    """The given paths, or the built-in generated corpus (made once) when none."""
    if paths:
        return list(paths)
    from .synth import default_corpus

    return [str(default_corpus())]


def _stream(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    corpus = Corpus.open(_corpus_paths(args.paths))
    options = Options(
        workers=args.jobs,
        shuffle=not args.no_shuffle,
        seed=args.seed,
        shuffle_buffer=args.shuffle_buffer,
        take=args.take,
        on_error=args.on_error,
        max_errors=args.max_errors,
        decode_errors=args.decode_errors,
    )
    iterator = DocumentIterator(corpus, options)
    start = time.perf_counter()
    documents = text_bytes = 0
    try:
        if args.jsonl:
            out = sys.stdout
            for doc in iterator:
                record = {
                    "subset": doc.subset,
                    "member": doc.member,
                    "name": doc.name,
                    "text": doc.text,
                }
                out.write(json.dumps(record, ensure_ascii=False))
                out.write("\n")
        else:
            total = args.take
            with tqdm(
                total=total,
                unit="doc",
                unit_scale=True,
                dynamic_ncols=True,
                disable=args.quiet,
                file=sys.stderr,
                mininterval=0.5,
            ) as bar:
                pending = 0
                for _ in iterator:
                    pending += 1
                    if pending == 2048:
                        bar.update(pending)
                        pending = 0
                        stats = iterator.stats
                        seconds = time.perf_counter() - start
                        bar.set_postfix_str(
                            f"{stats.text_bytes / seconds / 1e6:.1f} MB/s", refresh=False
                        )
                bar.update(pending)
    finally:
        iterator.close()
        seconds = time.perf_counter() - start
        stats = iterator.stats
        documents, text_bytes = stats.documents, stats.text_bytes
        line = (
            f"{documents} documents, {text_bytes / 1e6:.1f} MB of text in {seconds:.2f} s: "
            f"{documents / seconds:,.0f} documents/s, {text_bytes / seconds / 1e6:.1f} MB/s"
        )
        skipped = stats.skipped_members + stats.skipped_documents
        if skipped or stats.replaced_documents:
            line += (
                f"; skipped {stats.skipped_members} members, {stats.skipped_documents} documents"
                f"; replaced invalid UTF-8 in {stats.replaced_documents} documents"
            )
        print(line, file=sys.stderr)
        for name in stats.skipped[:20]:
            print(f"  skipped: {name}", file=sys.stderr)
    return 0


def _index(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .counts import count_documents

    corpus = Corpus.open(_corpus_paths(args.paths))
    if corpus.counts is not None and not args.force:
        print(
            f"already indexed: {sum(corpus.counts.documents)} documents in "
            f"{len(corpus.units)} members ({corpus.counts_paths()[0].name})",
            file=sys.stderr,
        )
        return 0
    splits = tuple((fraction, args.val_seed) for fraction in args.val_fraction)
    with tqdm(total=len(corpus.units), unit="member", disable=args.quiet, file=sys.stderr) as bar:
        counts = count_documents(corpus, workers=args.jobs, splits=splits, progress=bar.update)
    path = corpus.save_counts(counts)
    print(
        f"{sum(counts.documents)} documents in {len(corpus.units)} members; counts in {path}",
        file=sys.stderr,
    )
    return 0


def _synth(args: argparse.Namespace) -> int:
    from .synth import write_corpus

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="owt", description="Stream OpenWebText-style corpora at the speed of decompression."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    stream = sub.add_parser(
        "stream",
        help="read documents (progress bar and summary, or --jsonl to stdout)",
        description="Read a corpus: urlsf_subsetNN.tar files, folders of them, globs, or "
        "extracted *_data.xz members. No path: the built-in generated corpus.",
    )
    stream.add_argument("paths", nargs="*", help="files, folders or glob patterns")
    stream.add_argument("-j", "--jobs", type=int, default=cpu_count(), help="worker processes")
    stream.add_argument("--seed", type=int, default=0)
    stream.add_argument("--no-shuffle", action="store_true", help="corpus order")
    stream.add_argument(
        "--shuffle-buffer",
        type=int,
        default=Options.shuffle_buffer,
        help="documents shuffled together (default %(default)s)",
    )
    stream.add_argument("--take", type=int, default=None, help="stop after N documents")
    stream.add_argument("--on-error", choices=("raise", "skip", "warn"), default="raise")
    stream.add_argument("--max-errors", type=int, default=None)
    stream.add_argument("--decode-errors", choices=("strict", "replace"), default="strict")
    stream.add_argument(
        "--jsonl", action="store_true", help="write one JSON object per document to stdout"
    )
    stream.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    stream.set_defaults(run=_stream)

    index = sub.add_parser(
        "index",
        help="count the documents of every member once (needed for even sharding)",
    )
    index.add_argument("paths", nargs="*", help="files, folders or glob patterns")
    index.add_argument("-j", "--jobs", type=int, default=cpu_count(), help="worker processes")
    index.add_argument(
        "--val-fraction",
        type=float,
        action="append",
        default=None,
        help="also count this held-out split (default 0.0005; repeatable)",
    )
    index.add_argument("--val-seed", type=int, default=2357)
    index.add_argument("--force", action="store_true", help="count again even if cached")
    index.add_argument("-q", "--quiet", action="store_true")
    index.set_defaults(run=_index)

    synth = sub.add_parser("synth", help="write a generated corpus in the OpenWebText layout")
    synth.add_argument("out", help="output folder (must not exist or be empty)")
    synth.add_argument("--subsets", type=int, default=3)
    synth.add_argument("--members", type=int, default=60)
    synth.add_argument("--docs", type=int, default=390)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("-j", "--jobs", type=int, default=None, help="processes (default: all CPUs)")
    synth.add_argument("-q", "--quiet", action="store_true")
    synth.set_defaults(run=_synth)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "val_fraction", 0) is None:
        args.val_fraction = [0.0005]
    try:
        code: int = args.run(args)
        return code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our stdout went away (e.g. `owt stream --jsonl | head`).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (OWTError, ValueError, FileExistsError) as exc:
        print(f"owt: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
