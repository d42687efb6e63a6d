"""The ``owt`` command: parses arguments, calls the library, prints. No logic of its own."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import bench
from .corpus import Corpus
from .errors import OWTError
from .loader import DocumentIterator
from .options import SHAPING, Options
from .state import resume_options
from .synth import paths_or_default
from .workers import cpu_count

__all__ = ["main"]

EXIT_INTERRUPTED = 130


def _stream_options(args: argparse.Namespace, state: dict[str, Any] | None) -> Options:
    """The stream command's flags as options; the library fills in the state's shaping ones."""
    flags = {name: getattr(args, name, None) for name in (*SHAPING, "max_member_bytes", "timeout")}
    flags["even"] = None  # its flag says the rule too
    if args.even is not None:
        flags.update(even=args.even != "off", even_rule=None if args.even == "off" else args.even)
    given = {name: value for name, value in flags.items() if value is not None}
    return resume_options(
        {
            **given,
            "workers": args.jobs,
            "epoch": args.epoch,
            "epochs": args.epochs or None,
            "take": args.take,
            "on_error": args.on_error,
            "max_errors": args.max_errors,
            "decode_errors": args.decode_errors,
        },
        state,
    )


def _write_state(path: str, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically (a reader never sees half a file)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, indent=1)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def _stream(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    state = json.loads(Path(args.resume).read_text()) if args.resume else None
    corpus = Corpus.open(paths_or_default(args.paths))
    options = _stream_options(args, state)
    iterator = DocumentIterator(corpus, options, state=state)
    start = time.perf_counter()
    before = iterator.stats
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
                        text = iterator.stats.text_bytes - before.text_bytes
                        seconds = time.perf_counter() - start
                        bar.set_postfix_str(f"{text / seconds / 1e6:.1f} MB/s", refresh=False)
                bar.update(pending)
    finally:
        iterator.close()
        if args.state_out:
            _write_state(args.state_out, iterator.state_dict())
        seconds = time.perf_counter() - start
        stats = iterator.stats
        documents = stats.documents - before.documents
        text_bytes = stats.text_bytes - before.text_bytes
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

    corpus = Corpus.open(paths_or_default(args.paths))
    if corpus.counts is not None and not args.force:
        print(
            f"already indexed: {sum(corpus.counts.documents)} documents in "
            f"{len(corpus.units)} members ({corpus.counts_paths()[0].name})",
            file=sys.stderr,
        )
        return 0
    splits = tuple((fraction, args.val_seed) for fraction in args.val_fraction or [0.0005])
    with tqdm(total=len(corpus.units), unit="member", disable=args.quiet, file=sys.stderr) as bar:
        counts = count_documents(corpus, workers=args.jobs, splits=splits, progress=bar.update)
    path = corpus.save_counts(counts)
    print(
        f"{sum(counts.documents)} documents in {len(corpus.units)} members; counts in {path}",
        file=sys.stderr,
    )
    return 0


def _tokenize(args: argparse.Namespace) -> int:
    """Write nanoGPT-style ``train.bin`` / ``val.bin``: every document's ids, then end-of-text."""
    from tqdm import tqdm

    from .plan import in_validation
    from .tokenizer import load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    corpus = Corpus.open(paths_or_default(args.paths))
    options = Options(
        workers=args.jobs,
        seed=args.seed,
        shuffle=args.shuffle,
        take=args.take,
        tokenizer=args.tokenizer,
        on_error=args.on_error,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = ("train", "val")
    tokens = dict.fromkeys(names, 0)
    documents = dict.fromkeys(names, 0)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        files = {
            n: stack.enter_context(
                tempfile.NamedTemporaryFile(dir=out, prefix=f".{n}.bin.", delete=False)
            )
            for n in names
        }
        # Written under temporary names, renamed only once complete.
        for f in files.values():
            stack.callback(Path(f.name).unlink, missing_ok=True)
        iterator = stack.enter_context(DocumentIterator(corpus, options))
        bar = stack.enter_context(
            tqdm(unit="tok", unit_scale=True, disable=args.quiet, file=sys.stderr)
        )
        for doc in iterator:
            held_out = in_validation(doc.name, args.val_fraction, args.val_seed)
            split = "val" if held_out else "train"
            files[split].write(doc.tokens.tobytes())
            tokens[split] += len(doc.tokens)
            documents[split] += 1
            bar.update(len(doc.tokens))
        stats = iterator.stats
        for n in names:
            files[n].close()
            os.replace(files[n].name, out / f"{n}.bin")
    meta = {
        "tokenizer": tokenizer.spec,
        "fingerprint": tokenizer.fingerprint,
        "dtype": tokenizer.dtype.name,
        "eot": tokenizer.eot,
        "n_vocab": tokenizer.n_vocab,
        "corpus": corpus.fingerprint(),
        "seed": args.seed,
        "shuffle": args.shuffle,
        "val_fraction": args.val_fraction,
        "val_seed": args.val_seed,
        "documents": documents,
        "tokens": tokens,
        "skipped_members": stats.skipped_members,
        "skipped_documents": stats.skipped_documents,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    seconds = time.perf_counter() - start
    total = sum(tokens.values())
    print(
        f"{sum(documents.values())} documents, {total:,} tokens in {seconds:.1f} s "
        f"({total / seconds:,.0f} tokens/s): train.bin {tokens['train']:,}, "
        f"val.bin {tokens['val']:,} ({tokenizer.dtype.name}) in {out}",
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
    stream.add_argument("--seed", type=int, default=None, help="default 0")
    stream.add_argument(
        "--no-shuffle",
        dest="shuffle",
        action="store_const",
        const=False,
        default=None,
        help="corpus order",
    )
    stream.add_argument(
        "--shuffle-buffer",
        type=int,
        default=None,
        help=f"documents shuffled together (default {Options.shuffle_buffer})",
    )
    stream.add_argument("--epoch", type=int, default=0, help="first epoch (default 0)")
    stream.add_argument(
        "--epochs", type=int, default=1, help="epochs to run (default 1; 0: without end)"
    )
    stream.add_argument("--rank", type=int, default=None, help="this rank (default 0)")
    stream.add_argument("--world-size", type=int, default=None, help="ranks (default 1)")
    stream.add_argument(
        "--even",
        choices=("drop", "pad", "off"),
        default=None,
        help="equal counts per rank (default drop when --world-size > 1; needs owt index)",
    )
    stream.add_argument("--split", choices=("all", "train", "val"), default=None)
    stream.add_argument("--val-fraction", type=float, default=None, help="default 0.0005")
    stream.add_argument("--val-seed", type=int, default=None, help="default 2357")
    stream.add_argument(
        "--state-out",
        metavar="FILE",
        help="on exit (also after Ctrl-C or --take), write the state to resume from",
    )
    stream.add_argument("--resume", metavar="FILE", help="continue from a --state-out file")
    stream.add_argument(
        "--max-document-bytes",
        type=int,
        default=None,
        help=f"larger documents are errors (default {Options.max_document_bytes})",
    )
    stream.add_argument(
        "--max-member-bytes",
        type=int,
        default=None,
        help=f"members decompressing past this are errors (default {Options.max_member_bytes})",
    )
    stream.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds a busy worker may stay silent (default {Options.timeout:g})",
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

    tokenize = sub.add_parser(
        "tokenize",
        help="write train.bin and val.bin of token ids, as nanoGPT's prepare.py does",
        description="Tokenize every document in the workers and write its ids, then the "
        "end-of-text id, to OUT/train.bin or OUT/val.bin (flat arrays of the tokenizer's dtype: "
        "uint16 for gpt2; read with numpy.memmap), and OUT/meta.json. No path: the built-in "
        "generated corpus.",
    )
    tokenize.add_argument("paths", nargs="*", help="files, folders or glob patterns")
    tokenize.add_argument("--out", required=True, help="output folder")
    tokenize.add_argument(
        "--tokenizer",
        default="gpt2",
        help="gpt2 (offline), bytes, tiktoken:NAME or hf:PATH (default gpt2)",
    )
    tokenize.add_argument("-j", "--jobs", type=int, default=cpu_count(), help="worker processes")
    tokenize.add_argument("--seed", type=int, default=0)
    tokenize.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="corpus order")
    tokenize.add_argument("--val-fraction", type=float, default=0.0005)
    tokenize.add_argument("--val-seed", type=int, default=2357)
    tokenize.add_argument("--take", type=int, default=None, help="stop after N documents")
    tokenize.add_argument("--on-error", choices=("raise", "skip", "warn"), default="raise")
    tokenize.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    tokenize.set_defaults(run=_tokenize)

    bench.add_parser(sub)

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
    except (OWTError, ValueError, OSError) as exc:
        print(f"owt: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
