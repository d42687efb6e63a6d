"""``owt stream``: read a corpus with a progress bar and a closing summary, or as JSON
lines on stdout (``jsonl``), or packed into batches (``--pack``: what packing does to it);
``--state-out`` and ``--resume`` save and continue its state."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from openwebtext import interrupts
from openwebtext.cli import summary
from openwebtext.cli.args import (
    Subparsers,
    add_jobs,
    add_on_error,
    add_paths,
    add_quiet,
    add_text_column,
    at_least,
    open_corpus,
    option_type,
    parse_mix,
    token_files,
    tokenizer_spec,
)
from openwebtext.cli.jsonl import write_jsonl
from openwebtext.cli.standard import CLOSED_AT_START
from openwebtext.cli.streamchecks import check_flags, refuse_inputs, refusing_stdout
from openwebtext.errors import CorpusError, OutputError, OWTError, StateError, in_part
from openwebtext.files import named, output_path
from openwebtext.index import Corpus, NoColumn
from openwebtext.loader import DocumentIterator, Loader, Mixture, MixtureIterator
from openwebtext.options import NANOGPT_SPLIT, SHAPING, Options
from openwebtext.source import add_storage_options, retry_waited, storage_kwargs
from openwebtext.stream import (
    WINDOW,
    BatchesState,
    DocumentState,
    MixtureState,
    check_in_run,
    check_packing,
    members_in_run,
    resume_options,
)

__all__ = ["add_parser", "run"]


#: The flags whose value is not the option's: ``--even off`` is ``even=None`` (not evened out).
_OPTION_VALUES = {"even": {"off": None}}


def _stream_options(
    args: argparse.Namespace, state: DocumentState | None, run: Any = None
) -> Options:
    """The stream command's flags as options; the library fills in the state's shaping ones,
    and without ``--epochs`` the run's end of the state resumed (``run``, a mixture's or the
    batches' documents; else ``state``): a resumed run ends where the run it goes on would.

    A flag is given when it is not its parser default, None: whatever the option's value
    (``--even off`` gives ``even=None``, which must not give way to the default "drop")."""
    until = getattr(state if run is None else run, "until", 1)  # (absent, UNSET: one epoch)
    epochs = args.epochs
    if epochs is None and until is None:
        epochs = 0  # (without end)
    elif epochs is None:
        epochs = until - args.epoch if isinstance(until, int) and until > args.epoch else 1
    given = {}
    for name in (*SHAPING, "max_member_bytes", "timeout"):
        flag = getattr(args, name, None)
        if flag is not None:
            given[name] = _OPTION_VALUES.get(name, {}).get(flag, flag)
    return resume_options(
        {
            **given,
            "workers": args.jobs,
            "epoch": args.epoch,
            "epochs": epochs or None,
            "take": args.take,
            "on_error": args.on_error,
            "max_errors": args.max_errors,
            "decode_errors": args.decode_errors,
            "tokenizer": getattr(args, "tokenizer", None),
        },
        state,
    )


def _mixture(args: argparse.Namespace) -> Mixture:
    """The ``--mix`` parts, each opened as a corpus with the storage flags."""
    if args.paths:
        raise ValueError("give either paths or --mix parts, not both")
    names = [name for name, _, _ in args.mix]
    if len(set(names)) != len(names):
        raise ValueError(f"--mix names a part twice: {names}")
    parts = {}
    for name, where, _ in args.mix:
        try:
            if token_files([where]):  # (read with --tokenizer, as the --pack runs give it)
                parts[name] = open_corpus(args, [where], tokens=True)
                continue
            try:  # (--text-column names the column of the parts of records: a tars part has none)
                parts[name] = Corpus.open(where, on_error=args.on_error,
                                          text_column=args.text_column, **storage_kwargs(args))
            except NoColumn:
                parts[name] = Corpus.open(where, on_error=args.on_error, **storage_kwargs(args))
        except CorpusError as exc:
            in_part(exc, name)
            raise
    return Mixture(parts, {name: w for name, _, w in args.mix}, by=args.mix_by)


def _documents(
    corpus: Corpus, options: Options, state: DocumentState | None, whose: str | None
) -> DocumentIterator:
    """The stream (it checks the state first); a state it has nothing to read of, or that lies
    before its first epoch, is said as ``owt`` spells the fix (flags, not the library's
    keywords: ``--epochs 0``, never ``epochs=None``)."""
    try:
        return DocumentIterator(corpus, options, state=state)
    except StateError as exc:
        if state is not None and exc.field == "position.epoch":
            check_in_run(state, options, whose=whose or "the state", cli=True)
        raise


@contextlib.contextmanager
def _opening(state_out: Path | None, resumed: Any) -> Iterator[None]:
    """Opening the stream (its corpus, counts, the state checked): a Ctrl-C here, before any
    document is read, still writes ``--state-out``: the state resumed from, as it was. A fresh
    run has none yet (nothing was read): that is said, and nothing written. A signal that
    came while ``owt`` loaded is raised here (``interrupts.raise_early``)."""
    try:
        interrupts.raise_early()
        yield
    except KeyboardInterrupt:
        if state_out is not None and resumed is not None:
            with interrupts.deferred:
                summary.save_state(state_out, resumed.to_json(), run_failed=True)
        elif state_out is not None:
            print(f"owt: interrupted before the stream began (nothing read): no state written "
                  f"to {state_out}", file=sys.stderr)  # fmt: skip
        raise


def _run_packed(args: argparse.Namespace, state: Any) -> int:
    """``owt stream --pack``: the documents packed into batches as ``Loader.batches`` packs
    them (nothing written but the state); the summary says what packing did to them."""
    if not isinstance(state, BatchesState | None):
        raise OWTError(f"{args.resume}: a state of documents, not of --pack batches")
    if args.tokenizer is None:
        raise ValueError("--pack makes batches of token ids: give --tokenizer")
    state_out = output_path(args.state_out) if args.state_out else None
    with _opening(state_out, state):
        opening = time.perf_counter()
        source = _mixture(args) if args.mix else open_corpus(args, tokens=True)
        refuse_inputs(source, state_out, jsonl=False)
        opening_s = (time.perf_counter() - opening, 0.0)
        documents = None if state is None else state.documents
        if isinstance(documents, MixtureState):
            documents = next(iter(documents.parts.values()))
        options = _stream_options(args, documents, None if state is None else state.documents)
        if isinstance(state, BatchesState):  # (said before a finished state's "nothing left")
            check_packing(state, args.pack, args.window)
        if isinstance(state, BatchesState) and isinstance(state.documents, DocumentState):
            check_in_run(state.documents, options, whose=args.resume, cli=True)  # finished
        loader = Loader(source, options)
        window = {"window": args.window} if args.pack == "bestfit" else {}
        saved = None if state is None else state.to_json()
        opened = time.perf_counter()
        batches = loader.batches(
            args.seq_len, args.batch_size, packing=args.pack, state=saved, **window
        )
    from tqdm import tqdm

    before = batches.stats  # best fit may have read its window again: count from the state
    if state is not None:
        before = summary.at_state(before, state.documents)
    again = state is not None and args.pack == "bestfit"  # (its window read again: timed)
    start, made, finished = opened if again else time.perf_counter(), 0, False
    try:
        with tqdm(unit="batch", disable=args.quiet, file=sys.stderr, mininterval=0.5) as bar:
            for _ in batches:
                made += 1
                bar.update(1)
                interrupts.check()  # (a signal whose exception something swallowed)
        finished = True
    finally:
        if state_out is not None:
            with interrupts.deferred:
                summary.save_state(state_out, batches.state_dict(), run_failed=not finished)
        batches.close()
        stats = batches.stats
        summary.summary(stats, before, time.perf_counter() - start, opening_s, read=True,
                        of=_of(args))
        summary.packing_summary(args, stats, before, made)
        if isinstance(source, Mixture):
            summary.parts_summary(stats, before, packed=True)
    return 0


def _run_mixture(args: argparse.Namespace, state: Any) -> int:
    """``owt stream --mix``: the mixture's documents, its summary per part."""
    if isinstance(state, BatchesState):
        raise OWTError(f"{args.resume}: a state of --pack batches: resume it with --pack")
    if isinstance(state, DocumentState):
        raise OWTError(f"{args.resume}: a corpus's state, not a mixture's: resume it without --mix")
    state_out = output_path(args.state_out) if args.state_out else None
    if args.jsonl and CLOSED_AT_START.get(1):
        raise OutputError("standard output is closed (or open for reading only): nowhere to "
                          "write --jsonl")
    with _opening(state_out, state):
        opening = time.perf_counter()
        mixture = refusing_stdout(args, lambda: _mixture(args))
        refuse_inputs(mixture, state_out, args.jsonl)
        opening_s = (time.perf_counter() - opening, 0.0)
        first = None if state is None else next(iter(state.parts.values()))
        options = _stream_options(args, first, state)
        iterator = MixtureIterator(mixture, options, state=state)
    start = time.perf_counter()
    before = iterator.stats
    written: list[Any] = [iterator.mark()]
    finished = False
    try:
        if args.jsonl:
            write_jsonl(iterator, written)
        else:
            summary.show_progress(iterator, args, None)
        finished = True
    finally:
        if state_out is not None:
            with interrupts.deferred:
                state_now = iterator.state_dict(written[0] if args.jsonl else None)
                summary.save_state(state_out, state_now, run_failed=not finished)
        iterator.close()
        stats = summary.delivered(iterator, written[0] if args.jsonl else None)
        summary.summary(stats, before, time.perf_counter() - start, opening_s, of=_of(args))
        summary.parts_summary(stats, before)
    return 0


def _of(args: argparse.Namespace) -> str:
    """What the run's bytes are: ``text``, the ``ids`` of token files (their bytes in the
    files, ``Counters.text_bytes``), or a mixture's ``text and ids``."""
    given = [[where] for _, where, _ in args.mix] if args.mix else [args.paths]
    tokens = [token_files(paths) for paths in given]
    return "ids" if all(tokens) else "text and ids" if any(tokens) else "text"


def run(args: argparse.Namespace) -> int:
    """``owt stream``: read, show or write, save the state, sum up."""
    if args.jsonl and (args.tokenizer or args.pack):
        raise ValueError("--jsonl writes text: leave --tokenizer and --pack out")
    of = _of(args)  # (files of token ids, or parts of them: refused what they cannot do)
    if args.jsonl and of != "text":
        raise ValueError("--jsonl writes text: " + ("a part of token ids holds none" if args.mix
                         else "files of token ids hold none (read them with --tokenizer, or "
                         "--pack, as they were written)"))  # fmt: skip
    if of != "text" and not args.tokenizer:
        raise ValueError("files of token ids are read with the tokenizer that wrote them: give "
                         "--tokenizer (their meta.json's, e.g. gpt2)")  # fmt: skip
    idle = [flag for flag, given in (("--max-document-bytes", args.max_document_bytes),
                                     ("--decode-errors", args.decode_errors != "strict"))
            if given]  # fmt: skip
    if of == "ids" and idle:  # (a flag that would do nothing: refused, as elsewhere)
        raise ValueError(f"{' and '.join(idle)} shape{'s' * (len(idle) == 1)} text: files of "
                         "token ids hold none; leave them out")  # fmt: skip
    check_flags(args)
    if args.pack:
        return _run_packed(args, summary.read_state(args.resume) if args.resume else None)
    if args.mix:
        return _run_mixture(args, summary.read_state(args.resume) if args.resume else None)
    state = summary.read_state(args.resume) if args.resume else None
    if isinstance(state, BatchesState | MixtureState):
        how = "--pack" if isinstance(state, BatchesState) else "--mix"
        raise OWTError(f"{args.resume}: a state of {how}: resume it with {how}")
    # Checked now, not after the whole run; written only onto a regular file or a new path.
    state_out = output_path(args.state_out) if args.state_out else None
    if args.jsonl and CLOSED_AT_START.get(1):
        raise OutputError("standard output is closed (or open for reading only): nowhere to "
                          "write --jsonl")
    with _opening(state_out, state):
        opening, waited_before = time.perf_counter(), retry_waited()
        corpus = refusing_stdout(args, lambda: open_corpus(args, tokens=True))
        refuse_inputs(corpus, state_out, args.jsonl)
        opening_s = (time.perf_counter() - opening, retry_waited() - waited_before)
        options = _stream_options(args, state)
        iterator = _documents(corpus, options, state, args.resume)  # checks the state first
    if state is not None:  # and a finished run's state: nothing left to read
        check_in_run(state, options, whose=args.resume, cli=True)
    start = time.perf_counter()
    before = iterator.stats
    written = [iterator.mark()]  # --jsonl: the state of the last line written whole
    finished = False
    try:
        if args.jsonl:
            write_jsonl(iterator, written)
        else:
            summary.show_progress(iterator, args, members_in_run(iterator.corpus, options, state))
        finished = True
    except KeyboardInterrupt:
        sunk = summary.delivered(iterator, written[0] if args.jsonl else None)
        summary.summary(sunk, before, time.perf_counter() - start, opening_s, of=_of(args))
        raise
    finally:
        if state_out is not None:
            with interrupts.deferred:  # a signal arriving now waits until the state is saved
                state_now = iterator.state_dict(written[0] if args.jsonl else None)
                summary.save_state(state_out, state_now, run_failed=not finished)
        iterator.close()
    sunk = summary.delivered(iterator, written[0] if args.jsonl else None)
    summary.summary(sunk, before, time.perf_counter() - start, opening_s, of=_of(args))
    return 0


def add_parser(sub: Subparsers) -> None:
    """Register ``owt stream``."""
    stream = sub.add_parser(
        "stream",
        help="read documents (progress bar and summary, or --jsonl to stdout)",
        description="Read a corpus: urlsf_subsetNN.tar files, folders of them, globs, or "
        "extracted *_data.xz members; parquet or JSON lines files (docs/parquet.md); files of "
        "token ids (.bin, .ds: docs/token-formats.md) with --tokenizer. "
        "No path: the built-in generated corpus.",
    )
    add_paths(stream)
    add_storage_options(stream)
    add_text_column(stream)
    add_jobs(stream)
    stream.add_argument("--seed", type=option_type("seed"), default=None, help="default 0")
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
        type=option_type("shuffle_buffer"),
        default=None,
        help=f"documents shuffled together (default {Options.shuffle_buffer})",
    )
    stream.add_argument(
        "--epoch", type=option_type("epoch"), default=0, help="first epoch (default 0)"
    )
    stream.add_argument(
        "--epochs", type=at_least(0), default=None,
        help="epochs to run (default 1, or a resumed run's own; 0: without end)"
    )
    stream.add_argument("--rank", type=at_least(0), default=None, help="this rank (default 0)")
    stream.add_argument(
        "--world-size", type=option_type("world_size"), default=None, help="ranks (default 1)"
    )
    stream.add_argument(
        "--even",
        choices=("drop", "pad", "off"),
        default=None,
        help="equal counts per rank (default drop when --world-size > 1; the documents are "
        "counted first, once, unless owt index did)",
    )
    stream.add_argument(
        "--split",
        choices=("all", "train", "val"),
        default=None,
        help="all documents (default), the held-out val split, or the train rest: decided per "
        "document by a keyed hash of its name (--val-fraction, --val-seed)",
    )
    stream.add_argument(
        "--val-fraction",
        type=option_type("val_fraction", float),
        default=None,
        help=f"default {NANOGPT_SPLIT.fraction}",
    )
    stream.add_argument(
        "--val-seed",
        type=option_type("val_seed"),
        default=None,
        help=f"default {NANOGPT_SPLIT.seed}",
    )
    stream.add_argument(
        "--state-out",
        metavar="FILE",
        type=named("file"),
        help="on exit (also after Ctrl-C or --take), write the state to resume from",
    )
    stream.add_argument(
        "--resume", metavar="FILE", type=named("file"), help="continue from a --state-out file"
    )
    stream.add_argument(
        "--max-document-bytes",
        type=option_type("max_document_bytes"),
        default=None,
        help=f"larger documents are errors (default {Options.max_document_bytes})",
    )
    stream.add_argument(
        "--max-member-bytes",
        type=option_type("max_member_bytes"),
        default=None,
        help=f"members decompressing past this are errors (default {Options.max_member_bytes})",
    )
    stream.add_argument(
        "--timeout",
        type=option_type("timeout", float),
        default=None,
        help=f"seconds a busy worker may stay silent (default {Options.timeout:g})",
    )
    stream.add_argument(
        "--take", type=option_type("take"), default=None,
        help="stop after N documents (--pack bestfit: packs the whole window it is in)",
    )  # fmt: skip
    add_on_error(stream)
    stream.add_argument(
        "--max-errors",
        type=option_type("max_errors"),
        default=None,
        help="with --on-error skip or warn: stop with an error past this many skips "
        "(default: no bound)",
    )
    stream.add_argument(
        "--decode-errors",
        choices=("strict", "replace"),
        default="strict",
        help="strict: invalid UTF-8 makes a damaged document (see --on-error); replace: it "
        "becomes U+FFFD and the document is counted as replaced (default strict)",
    )
    stream.add_argument(
        "--jsonl", action="store_true", help="write one JSON object per document to stdout"
    )
    _add_mix_flags(stream)
    _add_pack_flags(stream)
    add_quiet(stream)
    stream.set_defaults(run=run)


def _add_mix_flags(stream: argparse.ArgumentParser) -> None:
    """``--mix``, ``--mix-by`` and ``--tokenizer``."""
    stream.add_argument(
        "--mix",
        action="append",
        type=parse_mix,
        default=[],
        metavar="NAME=PATH_OR_URL:WEIGHT",
        help="a part of a weighted mixture (repeat for each part; no paths then): its name, "
        "its corpus (a file, folder, glob or URL), its weight (docs/mixtures.md)",
    )
    stream.add_argument(
        "--mix-by",
        choices=("documents", "tokens"),
        default=None,
        help="the mixture's proportions count documents (default) or ids (needs --tokenizer)",
    )
    stream.add_argument(
        "--tokenizer",
        type=tokenizer_spec,
        default=None,
        help="hand out token ids (gpt2, tiktoken:NAME, hf:PATH, bytes): counted in the summary; "
        "files of token ids are read with the one that wrote them",
    )


def _add_pack_flags(stream: argparse.ArgumentParser) -> None:
    """``--pack`` and its shapes."""
    stream.add_argument(
        "--pack",
        choices=("concat", "bestfit"),
        default=None,
        help="pack the documents into batches as Loader.batches does (needs --tokenizer) and "
        "say what packing did: padding ids, documents cut and their pieces",
    )
    stream.add_argument(
        "--seq-len",
        type=at_least(1),
        default=None,
        help="--pack: ids a row predicts (default 1024)",
    )
    stream.add_argument(
        "--batch-size", type=at_least(1), default=None, help="--pack: rows per batch (default 8)"
    )
    stream.add_argument(
        "--window",
        type=at_least(1),
        default=None,
        help=f"--pack bestfit: documents packed at a time (default {WINDOW})",
    )
