"""The ``owt`` command: parses arguments, calls the library, prints. No logic of its own."""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from openwebtext import bench, interrupts
from openwebtext.engine import cpu_count
from openwebtext.errors import OutputError, OWTError, StateError, TruncatedMember
from openwebtext.files import atomic_write, output_path
from openwebtext.index import Corpus
from openwebtext.interrupts import EXIT_INTERRUPTED
from openwebtext.loader import Document, DocumentIterator, Stats
from openwebtext.options import SHAPING, Options
from openwebtext.prepare import Progress, Report
from openwebtext.source import add_storage_option, add_storage_options, storage, storage_kwargs
from openwebtext.stream import Mark, load_state, resume_options
from openwebtext.synth import paths_or_default

__all__ = ["main"]


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


#: ``--jsonl`` writes its lines in chunks of about this many bytes.
_CHUNK = 1 << 16


def _writer() -> Any:
    """A function writing bytes to stdout, counting in ``sent[0]`` how many got out (also
    when a signal interrupts it).

    Straight to the descriptor: a buffered text stream may report a chunk as written
    when a signal cut the ``write(2)`` short. Streams without one (tests) get the text
    layer.
    """
    out = sys.stdout
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):

        def write_text(data: bytes, sent: list[int]) -> None:
            out.write(data.decode())
            out.flush()
            sent[0] = len(data)

        return write_text
    out.flush()

    def write_all(data: bytes, sent: list[int]) -> None:
        view = memoryview(data)
        sent[0] = 0
        while sent[0] < len(view):
            sent[0] += os.write(fd, view[sent[0] :])

    return write_all


def _json_line(doc: Document) -> bytes:
    record = {"subset": doc.subset, "member": doc.member, "name": doc.name, "text": doc.text}
    try:
        return (json.dumps(record, ensure_ascii=False) + "\n").encode()
    except UnicodeEncodeError:  # a name that is not UTF-8 (surrogate escapes): JSON escapes
        return (json.dumps(record) + "\n").encode()


def _write_jsonl(iterator: DocumentIterator, written: list[Mark]) -> None:
    """Write one JSON line per document to stdout; ``written[0]`` follows what got out.

    Lines are written in chunks with signals held back (``interrupts.deferred``), and
    ``written[0]`` becomes the iterator's mark after the last line that got out whole,
    so the state describes exactly the lines on stdout. An interrupt between chunks drops
    the lines not yet written (the resumed run hands them out again). Only a reader that
    takes nothing for ``GRACE_SECONDS`` after a signal can leave a line cut short; the
    state still ends before it.
    """
    write = _writer()
    lines: list[bytes] = []
    marks: list[Mark] = []
    size = 0

    def flush() -> None:
        sent = [0]
        with interrupts.deferred:  # the note below too: a signal right after the write waits
            try:
                write(b"".join(lines), sent)
            finally:
                ends = itertools.accumulate(map(len, lines))
                whole = bisect.bisect_right(list(ends), sent[0])
                if whole:
                    written[0] = marks[whole - 1]
                lines.clear()
                marks.clear()

    try:
        for doc in iterator:
            line = _json_line(doc)
            lines.append(line)
            marks.append(iterator.mark())
            size += len(line)
            if size >= _CHUNK:
                flush()
                size = 0
    except OWTError:
        flush()  # the documents before the error are good, and the state says so
        raise
    flush()


def _members_in_run(options: Options, units: int, state: dict[str, Any] | None) -> int | None:
    """How many members this run reads (for the progress bar), or None without end."""
    if options.epochs is None:
        return None
    per_epoch = len(range(options.rank, units, options.world_size))
    epoch, block = options.epoch, 0
    if state is not None:
        epoch, block = state["position"]["epoch"], state["position"]["block"]
    return max(0, per_epoch * (options.epoch + options.epochs - epoch) - block)


def _show_progress(
    iterator: DocumentIterator, args: argparse.Namespace, members: int | None
) -> None:
    """Read everything, with a bar of members done of the total, time left, docs/s, MB/s."""
    from tqdm import tqdm

    before = iterator.stats
    start = time.perf_counter()
    with tqdm(
        total=args.take if args.take is not None else members,
        unit="doc" if args.take is not None else "member",
        dynamic_ncols=True,
        disable=args.quiet,
        file=sys.stderr,
        mininterval=0.5,
    ) as bar:

        def update() -> None:
            stats = iterator.stats
            if args.take is not None:
                bar.update(stats.documents - before.documents - bar.n)
            else:
                bar.update(stats.units - before.units - bar.n)
            seconds = max(time.perf_counter() - start, 1e-9)
            docs = (stats.documents - before.documents) / seconds
            mb = (stats.text_bytes - before.text_bytes) / seconds / 1e6
            bar.set_postfix_str(f"{docs:,.0f} docs/s, {mb:.1f} MB/s", refresh=False)

        pending = 0
        for _ in iterator:
            pending += 1
            if pending == 2048:
                pending = 0
                update()
        update()


def _summary(iterator: DocumentIterator, before: Stats, seconds: float) -> None:
    stats = iterator.stats
    documents = stats.documents - before.documents
    text_bytes = stats.text_bytes - before.text_bytes
    seconds = max(seconds, 1e-9)
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


def _check_not_finished(path: str, state: dict[str, Any], options: Options) -> None:
    """Refuse a state at or past the end of the epochs this run would read."""
    epoch = state["position"]["epoch"]
    if options.epochs is not None and epoch >= options.epoch + options.epochs:
        raise StateError(
            f"{path}: nothing left to read: the state is at epoch {epoch}, and this run "
            f"reads epochs {options.epoch}..{options.epoch + options.epochs - 1}; give "
            f"--epochs {epoch - options.epoch + 1} to read epoch {epoch}"
        )


def _save_state(path: Path, state: dict[str, Any], *, run_failed: bool) -> None:
    """Write the state; a failure to do so never hides the error that ended the run."""
    try:
        atomic_write(path, json.dumps(state, indent=1) + "\n")
    except (OSError, OWTError) as exc:
        if not run_failed:
            raise
        print(f"owt: error: cannot write the state to {path}: {exc}", file=sys.stderr)


def _open_corpus(args: argparse.Namespace) -> Corpus:
    return Corpus.open(paths_or_default(args.paths), **storage_kwargs(args))


def _stream(args: argparse.Namespace) -> int:
    state = load_state(args.resume) if args.resume else None
    # Checked now, not after the whole run; written only onto a regular file or a new path.
    state_out = output_path(args.state_out) if args.state_out else None
    if args.jsonl and _closed_at_start.get(1):
        raise OutputError("standard output is closed: nowhere to write --jsonl")
    corpus = _open_corpus(args)
    options = _stream_options(args, state)
    iterator = DocumentIterator(corpus, options, state=state)  # checks the state first
    if state is not None:
        _check_not_finished(args.resume, state, options)
    start = time.perf_counter()
    before = iterator.stats
    written = [iterator.mark()]  # --jsonl: the state of the last line written whole
    finished = False
    try:
        if args.jsonl:
            _write_jsonl(iterator, written)
        else:
            _show_progress(iterator, args, _members_in_run(options, len(corpus.units), state))
        finished = True
    except KeyboardInterrupt:
        _summary(iterator, before, time.perf_counter() - start)
        raise
    finally:
        if state_out is not None:
            with interrupts.deferred:  # a signal arriving now waits until the state is saved
                state_now = iterator.state_dict(written[0] if args.jsonl else None)
                _save_state(state_out, state_now, run_failed=not finished)
        iterator.close()
    _summary(iterator, before, time.perf_counter() - start)
    return 0


def _index(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from openwebtext.stream import count_documents

    corpus = _open_corpus(args)
    if corpus.counts is not None and not args.force:
        print(
            f"already indexed: {sum(corpus.counts.documents)} documents in "
            f"{len(corpus.units)} members ({corpus.counts_paths()[0].name})",
            file=sys.stderr,
        )
        return 0
    splits = tuple((fraction, args.val_seed) for fraction in args.val_fraction or [0.0005])
    skipped: list[OWTError] = []
    with tqdm(total=len(corpus.units), unit="member", disable=args.quiet, file=sys.stderr) as bar:
        counts = count_documents(
            corpus,
            workers=args.jobs,
            splits=splits,
            progress=bar.update,
            on_error=args.on_error,
            on_skip=skipped.append,
        )
    path = corpus.save_counts(counts)
    print(
        f"{sum(counts.documents)} documents in {len(corpus.units)} members; counts in {path}",
        file=sys.stderr,
    )
    if skipped:
        cut = sum(isinstance(e, TruncatedMember) for e in skipped)
        # Counted as a stream under --on-error skip reads them; a stream meets them again
        # under its own --on-error.
        print(
            f"skipped {len(skipped) - cut} members; {cut} members cut short (their documents "
            "before the cut counted)",
            file=sys.stderr,
        )
        for error in skipped[:20]:
            print(f"  skipped: {error}", file=sys.stderr)
    return 0


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
    from openwebtext.prepare import PrepareOptions, prepare

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

    def run(update: Callable[[Progress], None]) -> Report:
        if args.engine == "ray":
            return _tokenize_on_ray(args, corpus, options, shard, update)
        return prepare(
            corpus,
            args.out,
            options,
            shard=shard,
            restart=args.restart,
            progress=update,
            checkpoint_seconds=args.checkpoint_seconds,
        )

    return _with_progress(run, args.quiet)


def _with_progress(run: Callable[[Callable[[Progress], None]], Report], quiet: bool) -> int:
    """Run a tokenize or merge under its progress bars (closed however it ends, Ctrl-C
    included, so the message after them stands on its own line), then say what it wrote."""
    update, close = _prepare_progress(quiet)
    start = time.perf_counter()
    try:
        report = run(update)
    finally:
        close()
    _print_prepared(report, time.perf_counter() - start)
    return 0


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
    )


def _merge(args: argparse.Namespace) -> int:
    """Join the slices of ``owt tokenize --shard i/n`` (see ``openwebtext.prepare.merge``)."""
    from openwebtext.prepare import merge

    if args.storage_options:
        storage.configure(dict(args.storage_options))

    def run(update: Callable[[Progress], None]) -> Report:
        return merge(
            args.slices,
            args.out,
            restart=args.restart,
            progress=update,
            checkpoint_seconds=args.checkpoint_seconds,
        )

    return _with_progress(run, args.quiet)


def _synth(args: argparse.Namespace) -> int:
    from openwebtext.synth import write_corpus

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


def _option(name: str, convert: type = int) -> Any:
    """An argparse type: a value of Options field ``name``, refused as Options refuses it."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        try:
            Options(**{name: value})
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    parse.__name__ = name
    return parse


def _at_least(low: int) -> Any:
    """An argparse type: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, not {value}")
        return value

    return parse


def _add_on_error(parser: argparse.ArgumentParser) -> None:
    """Every command's ``--on-error``: what a damaged member or document does."""
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip", "warn"),
        default="raise",
        help="raise: stop at the first damaged member or document (naming it); skip: leave it "
        "out and count it; warn: skip and log it (default raise)",
    )


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
    add_storage_options(stream)
    stream.add_argument(
        "-j", "--jobs", type=_option("workers"), default=cpu_count(), help="worker processes"
    )
    stream.add_argument("--seed", type=_option("seed"), default=None, help="default 0")
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
        type=_option("shuffle_buffer"),
        default=None,
        help=f"documents shuffled together (default {Options.shuffle_buffer})",
    )
    stream.add_argument("--epoch", type=_option("epoch"), default=0, help="first epoch (default 0)")
    stream.add_argument(
        "--epochs", type=_at_least(0), default=1, help="epochs to run (default 1; 0: without end)"
    )
    stream.add_argument("--rank", type=_at_least(0), default=None, help="this rank (default 0)")
    stream.add_argument(
        "--world-size", type=_option("world_size"), default=None, help="ranks (default 1)"
    )
    stream.add_argument(
        "--even",
        choices=("drop", "pad", "off"),
        default=None,
        help="equal counts per rank (default drop when --world-size > 1; needs owt index)",
    )
    stream.add_argument("--split", choices=("all", "train", "val"), default=None)
    stream.add_argument(
        "--val-fraction", type=_option("val_fraction", float), default=None, help="default 0.0005"
    )
    stream.add_argument("--val-seed", type=_option("val_seed"), default=None, help="default 2357")
    stream.add_argument(
        "--state-out",
        metavar="FILE",
        help="on exit (also after Ctrl-C or --take), write the state to resume from",
    )
    stream.add_argument("--resume", metavar="FILE", help="continue from a --state-out file")
    stream.add_argument(
        "--max-document-bytes",
        type=_option("max_document_bytes"),
        default=None,
        help=f"larger documents are errors (default {Options.max_document_bytes})",
    )
    stream.add_argument(
        "--max-member-bytes",
        type=_option("max_member_bytes"),
        default=None,
        help=f"members decompressing past this are errors (default {Options.max_member_bytes})",
    )
    stream.add_argument(
        "--timeout",
        type=_option("timeout", float),
        default=None,
        help=f"seconds a busy worker may stay silent (default {Options.timeout:g})",
    )
    stream.add_argument("--take", type=_option("take"), default=None, help="stop after N documents")
    _add_on_error(stream)
    stream.add_argument("--max-errors", type=_option("max_errors"), default=None)
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
    add_storage_options(index)
    index.add_argument(
        "-j", "--jobs", type=_option("workers"), default=cpu_count(), help="worker processes"
    )
    index.add_argument(
        "--val-fraction",
        type=_option("val_fraction", float),
        action="append",
        default=None,
        help="also count this held-out split (default 0.0005; repeatable)",
    )
    index.add_argument("--val-seed", type=_option("val_seed"), default=2357)
    index.add_argument("--force", action="store_true", help="count again even if cached")
    _add_on_error(index)
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
        "--shard i/n for every i into separate folders, then `owt merge`. OUT may be a URL\n"
        "(s3://bucket/prefix/): the files are built in a local staging folder under TMPDIR\n"
        "and uploaded when finished, meta.json last; --storage-option applies to it too.",
    )
    tokenize.add_argument("paths", nargs="*", help="files, folders or glob patterns (or URLs)")
    add_storage_options(tokenize)
    tokenize.add_argument(
        "--out", required=True, help="output folder, or URL (s3://bucket/prefix/, any fsspec URL)"
    )
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
    tokenize.add_argument(
        "-j", "--jobs", type=_option("workers"), default=cpu_count(), help="worker processes"
    )
    tokenize.add_argument(
        "--seed", type=_option("seed"), default=0, help="hash: member order (default 0)"
    )
    tokenize.add_argument(
        "--no-shuffle", dest="shuffle", action="store_false", help="hash: corpus order"
    )
    tokenize.add_argument(
        "--val-fraction",
        type=_option("val_fraction", float),
        default=0.0005,
        help="held-out share (default 0.0005)",
    )
    tokenize.add_argument(
        "--val-seed",
        type=_option("val_seed"),
        default=2357,
        help="hash key / nanogpt permutation seed (2357)",
    )
    tokenize.add_argument(
        "--take", type=_option("take"), default=None, help="stop after N documents"
    )
    _add_on_error(tokenize)
    tokenize.add_argument(
        "--shard",
        metavar="I/N",
        help="prepare slice I of N of the members into OUT; join the slices with owt merge",
    )
    tokenize.add_argument(
        "--restart", action="store_true", help="throw away the progress recorded in OUT"
    )
    tokenize.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: worker processes here; ray: Ray tasks (pip install 'openwebtext[ray]')",
    )
    tokenize.add_argument(
        "--address",
        default=None,
        help="with --engine ray: the Ray cluster (default: start a local instance of -j CPUs)",
    )
    tokenize.add_argument(
        "--units-per-task",
        type=int,
        default=16,
        help="with --engine ray: members per Ray task (default 16; keep it to resume)",
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
    merge.add_argument(
        "slices", nargs="+", metavar="DIR", help="slice folders or URLs, in any order"
    )
    merge.add_argument("--out", required=True, help="output folder, or URL")
    add_storage_option(merge)
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


#: Standard descriptors found closed at start (and given /dev/null): {fd: True}.
_closed_at_start: dict[int, bool] = {}


def _open_standard_streams() -> None:
    """Give a closed stdin, stdout or stderr /dev/null.

    Otherwise the next file or pipe opened would take its number, and messages meant
    for stderr would go into it (or fail, ending the run).
    """
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        _closed_at_start[fd] = True
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w" if fd else "r", closefd=False))  # noqa: SIM115


def main(argv: Sequence[str] | None = None) -> int:
    _open_standard_streams()
    with interrupts.interruptible():
        parser = build_parser()
        args = parser.parse_args(argv)
        try:
            code: int = args.run(args)
            return code
        except KeyboardInterrupt as interrupt:
            code = interrupts.exit_code(interrupt)
            print("interrupted" if code == EXIT_INTERRUPTED else "terminated", file=sys.stderr)
            return code
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
