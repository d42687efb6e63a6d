"""The ``owt`` command: parses arguments, calls the library, prints. No logic of its own."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import bench
from .corpus import Corpus
from .errors import OWTError
from .loader import DocumentIterator
from .options import SHAPING, Options
from .prepare import Progress, Report
from .state import resume_options
from .synth import paths_or_default
from .workers import cpu_count

__all__ = ["main"]

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


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


def _storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``; the value as JSON when it is (``true``, ``3``), else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return key, parsed


def _add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        type=_storage_option,
        action="append",
        default=[],
        help="for URLs: passed to the fsspec filesystem (repeatable), e.g. endpoint_url=…",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="for URLs: keep the members read in this folder"
    )
    parser.add_argument(
        "--cache-size",
        type=_size,
        default=None,
        metavar="SIZE",
        help="cap of --cache-dir, e.g. 20G (least recently used out first)",
    )


def _size(text: str) -> int:
    from .membercache import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _open_corpus(args: argparse.Namespace) -> Corpus:
    options = dict(getattr(args, "storage_options", None) or [])
    return Corpus.open(
        paths_or_default(args.paths),
        storage_options=options or None,
        cache_dir=getattr(args, "cache_dir", None),
        cache_size=getattr(args, "cache_size", None),
    )


def _stream(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    state = json.loads(Path(args.resume).read_text()) if args.resume else None
    corpus = _open_corpus(args)
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

    corpus = _open_corpus(args)
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


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM ends the command as Ctrl-C does (progress kept), but exits 143."""

    def handler(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so that the same clean-up runs."""


def _prepare_progress(quiet: bool) -> tuple[Callable[[Progress], None], Callable[[], None]]:
    """A tqdm bar per phase: compressed bytes read (tokenize) or bytes written, and tokens/s."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}
    started: dict[str, float] = {}
    labels = {"tokenize": "tokenize", "permute": "permuted copy", "copy": "merge"}

    def update(event: Progress) -> None:
        bar = bars.get(event.phase)
        if bar is None:
            for other in bars.values():
                other.close()
            bar = bars[event.phase] = tqdm(
                total=event.total, initial=event.done, unit="B", unit_scale=True, disable=quiet,
                file=sys.stderr,
                desc=labels.get(event.phase, event.phase), dynamic_ncols=True, mininterval=0.5,
            )  # fmt: skip
            started[event.phase] = time.perf_counter()
        bar.update(event.done - bar.n)
        if event.tokens and not quiet:
            rate = event.tokens / max(time.perf_counter() - started[event.phase], 1e-9)
            bar.set_postfix_str(f"{rate / 1e6:.2f} M tokens/s", refresh=False)

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return update, close


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/n (e.g. 0/4), not {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"--shard i/n needs 0 <= i < n, not {text!r}")
    return index, count


def _print_prepared(report: Report, seconds: float) -> None:
    meta = report.meta
    if report.already:
        print(f"{report.out} already holds these files (meta.json): nothing to do", file=sys.stderr)
        return
    documents, tokens = meta["documents"], meta["tokens"]
    total = sum(tokens.values())
    files = ", ".join(f"{name} {tokens[name.split('.')[0]]:,}" for name in meta["files"]
                      if name.split(".")[0] in tokens)  # fmt: skip
    if "all" in tokens:
        files = f"tokens.bin {tokens['all']:,} (a slice: join slices with owt merge)"
    print(
        f"{sum(documents.values())} documents, {total:,} tokens in {seconds:.1f} s "
        f"({total / max(seconds, 1e-9):,.0f} tokens/s{', resumed' if report.resumed else ''}): "
        f"{files} ({meta['dtype']}) in {report.out}",
        file=sys.stderr,
    )
    skipped = meta["skipped_members"] + meta["skipped_documents"] + meta["partial_members"]
    if skipped:
        print(
            f"skipped {meta['skipped_members']} members, {meta['skipped_documents']} documents; "
            f"{meta['partial_members']} members cut short (their documents before the cut kept)",
            file=sys.stderr,
        )
        for line in report.skipped[:20]:
            print(f"  skipped: {line}", file=sys.stderr)


def _tokenize(args: argparse.Namespace) -> int:
    """Write nanoGPT-style ``train.bin`` / ``val.bin`` (see ``openwebtext.prepare``)."""
    from .prepare import PrepareOptions, prepare

    options = PrepareOptions(
        split=args.split,
        tokenizer=args.tokenizer,
        workers=args.jobs,
        seed=args.seed,
        shuffle=args.shuffle,
        val_fraction=args.val_fraction,
        val_seed=args.val_seed,
        take=args.take,
        on_error=args.on_error,
    )
    shard = _parse_shard(args.shard)
    corpus = _open_corpus(args)
    update, close = _prepare_progress(args.quiet)
    start = time.perf_counter()
    with _terminate_as_interrupt():
        try:
            report = prepare(
                corpus,
                args.out,
                options,
                shard=shard,
                restart=args.restart,
                progress=update,
                checkpoint_seconds=args.checkpoint_seconds,
            )
        finally:
            close()
    _print_prepared(report, time.perf_counter() - start)
    return 0


def _merge(args: argparse.Namespace) -> int:
    """Join the slices of ``owt tokenize --shard i/n`` (see ``openwebtext.prepare.merge``)."""
    from .prepare import merge

    update, close = _prepare_progress(args.quiet)
    start = time.perf_counter()
    with _terminate_as_interrupt():
        try:
            report = merge(
                args.slices,
                args.out,
                restart=args.restart,
                progress=update,
                checkpoint_seconds=args.checkpoint_seconds,
            )
        finally:
            close()
    _print_prepared(report, time.perf_counter() - start)
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
    stream.add_argument("paths", nargs="*", help="files, folders or glob patterns (or URLs)")
    _add_storage_options(stream)
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
    index.add_argument("paths", nargs="*", help="files, folders or glob patterns (or URLs)")
    _add_storage_options(index)
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
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Tokenize every document in the workers and write its ids, then the\n"
        "end-of-text id, to OUT/train.bin or OUT/val.bin (flat arrays of the tokenizer's dtype:\n"
        "uint16 for gpt2; read with numpy.memmap), and OUT/meta.json (options, counts, sha256\n"
        "of each file). No path: the built-in generated corpus.\n\n"
        "Split rules (--split):\n"
        "  hash     (default) a document is held out when a keyed hash of its name is below\n"
        "           --val-fraction (key --val-seed), as `owt stream --split val`; members in\n"
        "           the order of --seed (or corpus order with --no-shuffle).\n"
        "  nanogpt  byte-identical to nanoGPT's data/openwebtext/prepare.py over the same\n"
        "           archives through the Hugging Face loading script: its text normalisation,\n"
        "           train_test_split(test_size=0.0005, seed=2357) and its file order.\n\n"
        "Interrupted (Ctrl-C, SIGTERM, SIGKILL, power loss)? Run the same command again: it goes\n"
        "on from the progress recorded in OUT (--restart starts over). Across machines: run\n"
        "--shard i/n for every i into separate folders, then `owt merge`.",
    )
    tokenize.add_argument("paths", nargs="*", help="files, folders or glob patterns (or URLs)")
    _add_storage_options(tokenize)
    tokenize.add_argument("--out", required=True, help="output folder")
    tokenize.add_argument(
        "--split",
        choices=("hash", "nanogpt"),
        default="hash",
        help="hash (default): keyed hash of each document's name; nanogpt: nanoGPT's exact files",
    )
    tokenize.add_argument(
        "--tokenizer",
        default="gpt2",
        help="gpt2 (offline), bytes, tiktoken:NAME or hf:PATH (default gpt2)",
    )
    tokenize.add_argument("-j", "--jobs", type=int, default=cpu_count(), help="worker processes")
    tokenize.add_argument("--seed", type=int, default=0, help="hash: member order (default 0)")
    tokenize.add_argument(
        "--no-shuffle", dest="shuffle", action="store_false", help="hash: corpus order"
    )
    tokenize.add_argument(
        "--val-fraction", type=float, default=0.0005, help="held-out share (default 0.0005)"
    )
    tokenize.add_argument(
        "--val-seed", type=int, default=2357, help="hash key / nanogpt permutation seed (2357)"
    )
    tokenize.add_argument("--take", type=int, default=None, help="stop after N documents")
    tokenize.add_argument("--on-error", choices=("raise", "skip", "warn"), default="raise")
    tokenize.add_argument(
        "--shard",
        metavar="I/N",
        help="prepare slice I of N of the members into OUT; join the slices with owt merge",
    )
    tokenize.add_argument(
        "--restart", action="store_true", help="throw away the progress recorded in OUT"
    )
    tokenize.add_argument("--checkpoint-seconds", type=float, default=2.0, help=argparse.SUPPRESS)
    tokenize.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    tokenize.set_defaults(run=_tokenize)

    merge = sub.add_parser(
        "merge",
        help="join the slices of owt tokenize --shard into train.bin and val.bin",
        description="Join the folders written by `owt tokenize --shard i/n` (every i, same "
        "corpus and options) into the train.bin, val.bin and meta.json one run would have "
        "written, byte for byte. Resumable as owt tokenize is.",
    )
    merge.add_argument("slices", nargs="+", metavar="DIR", help="slice folders, in any order")
    merge.add_argument("--out", required=True, help="output folder")
    merge.add_argument(
        "--restart", action="store_true", help="throw away the progress recorded in OUT"
    )
    merge.add_argument("--checkpoint-seconds", type=float, default=2.0, help=argparse.SUPPRESS)
    merge.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    merge.set_defaults(run=_merge)

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
    except KeyboardInterrupt as exc:
        print("interrupted", file=sys.stderr)
        return EXIT_TERMINATED if isinstance(exc, _Terminated) else EXIT_INTERRUPTED
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
