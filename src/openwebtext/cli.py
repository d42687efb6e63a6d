"""The ``owt`` command: parses arguments, calls the library, prints. No logic of its own."""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import bench, interrupts
from .corpus import Corpus
from .errors import OutputError, OWTError, StateError
from .files import atomic_write, output_path
from .interrupts import EXIT_INTERRUPTED
from .loader import Document, DocumentIterator, Stats
from .options import Options
from .state import load_state
from .stream import Mark
from .synth import paths_or_default
from .workers import cpu_count

__all__ = ["main"]


#: Options a resumed stream takes from its state unless given again on the command line.
_SHAPING_FLAGS = {
    "shuffle": "shuffle",
    "seed": "seed",
    "shuffle_buffer": "shuffle_buffer",
    "rank": "rank",
    "world_size": "world_size",
    "split": "split",
    "val_fraction": "val_fraction",
    "val_seed": "val_seed",
}


def _stream_options(args: argparse.Namespace, state: dict[str, Any] | None) -> Options:
    saved = state.get("config", {}) if state else {}
    shaping: dict[str, Any] = {}
    for flag, option in _SHAPING_FLAGS.items():
        value = getattr(args, flag)
        if value is None and option in saved:
            value = saved[option]
        if value is not None:
            shaping[option] = value
    even = args.even if args.even is not None else saved.get("even", "unset")
    if even != "unset":
        shaping["even"] = even not in (None, "off")
        if even not in (None, "off"):
            shaping["even_rule"] = even
    limits = {
        name: getattr(args, name)
        for name in ("max_document_bytes", "max_member_bytes", "timeout")
        if getattr(args, name) is not None
    }
    return Options(
        workers=args.jobs,
        epoch=args.epoch,
        epochs=args.epochs or None,
        take=args.take,
        on_error=args.on_error,
        max_errors=args.max_errors,
        decode_errors=args.decode_errors,
        **shaping,
        **limits,
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


def _stream(args: argparse.Namespace) -> int:
    state = load_state(args.resume) if args.resume else None
    # Checked now, not after the whole run; written only onto a regular file or a new path.
    state_out = output_path(args.state_out) if args.state_out else None
    if args.jsonl and _closed_at_start.get(1):
        raise OutputError("standard output is closed: nowhere to write --jsonl")
    corpus = Corpus.open(paths_or_default(args.paths))
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
        iterator.close()
        if state_out is not None:
            state_now = iterator.state_dict(written[0] if args.jsonl else None)
            _save_state(state_out, state_now, run_failed=not finished)
    _summary(iterator, before, time.perf_counter() - start)
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
    stream.add_argument("--on-error", choices=("raise", "skip", "warn"), default="raise")
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
    index.add_argument("paths", nargs="*", help="files, folders or glob patterns")
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
    tokenize.add_argument(
        "-j", "--jobs", type=_option("workers"), default=cpu_count(), help="worker processes"
    )
    tokenize.add_argument("--seed", type=_option("seed"), default=0)
    tokenize.add_argument("--no-shuffle", dest="shuffle", action="store_false", help="corpus order")
    tokenize.add_argument("--val-fraction", type=_option("val_fraction", float), default=0.0005)
    tokenize.add_argument("--val-seed", type=_option("val_seed"), default=2357)
    tokenize.add_argument(
        "--take", type=_option("take"), default=None, help="stop after N documents"
    )
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
