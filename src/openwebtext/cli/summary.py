"""What ``owt stream`` says and saves: the progress bar, the closing summary (documents, text,
rates, skips; per part of a mixture; what packing did), and the state file: written, and
read (``--resume``: once, a pipe's too, and at most ``MOST_STATE_BYTES``)."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from openwebtext import codec, interrupts
from openwebtext.cli.args import plural
from openwebtext.errors import OutputError, OWTError, StateError
from openwebtext.files import atomic_write
from openwebtext.loader import DocumentIterator, MixtureIterator, Stats
from openwebtext.stream import (
    BatchesState,
    Counters,
    DocumentState,
    Mark,
    MixMark,
    MixtureState,
    MixtureStats,
    load_state,
)

__all__ = [
    "MOST_STATE_BYTES",
    "at_state",
    "delivered",
    "packing_summary",
    "parts_summary",
    "read_state",
    "save_state",
    "show_progress",
    "summary",
]

#: The most bytes ``--resume`` reads of a file: a state is some KB (a best-fit window's some MB);
#: a file past this (``/dev/zero``, a corpus named by mistake) is not one.
MOST_STATE_BYTES = 64 << 20


def show_progress(
    iterator: DocumentIterator | MixtureIterator, args: argparse.Namespace, members: int | None
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
                interrupts.check()  # (a signal whose exception something swallowed)
        update()


def summary(
    stats: Stats, before: Stats, seconds: float, opening: tuple[float, float], *,
    read: bool = False,
    of: str = "text",
) -> None:
    """The closing line: documents, ids (with a tokenizer), text and rates since ``before``,
    what was skipped, left out or repeated, and a slow opening. ``read``: said of the documents
    read (batches: the packer reads ahead of the batches handed out: the runs of documents the
    stream hands it). ``of``: what the bytes counted are (a token corpus's: its ids')."""
    documents = stats.documents - before.documents
    text_bytes = stats.text_bytes - before.text_bytes
    tokens = stats.tokens - before.tokens
    seconds = max(seconds, 1e-9)
    line = (
        f"{'read ' if read else ''}{plural(documents, 'document')}"
        f"{' (with those read ahead of the batches)' if read else ''}, "
        f"{f'{tokens:,} ids, ' if tokens else ''}"
        f"{text_bytes / 1e6:.1f} MB of {of} in {seconds:.2f} s: "
        f"{documents / seconds:,.0f} documents/s, {text_bytes / seconds / 1e6:.1f} MB/s"
    )
    keys = ("skipped_members", "skipped_documents", "replaced_documents")
    members, skipped, replaced = (getattr(stats, k) - getattr(before, k) for k in keys)
    if members or skipped or replaced:  # (this run's: a resumed one's state counts the others)
        line += (
            f"; skipped {plural(members, 'member')}, {plural(skipped, 'document')}"
            f"; replaced invalid UTF-8 in {plural(replaced, 'document')}"
        )
    partial = stats.partial_members - before.partial_members
    if partial:  # (named in stats.skipped too)
        line += f"; {plural(partial, 'member')} cut short (the documents before the cut read)"
    if stats.skipped_files:  # left out when the corpus was opened (--on-error skip)
        line += f"; skipped {plural(stats.skipped_files, 'file')} (not read at all)"
    dropped = stats.dropped_documents - before.dropped_documents
    repeated = stats.repeated_documents - before.repeated_documents
    if dropped or repeated:
        line += (
            f"; to keep the ranks even, left out {plural(dropped, 'document')} and read "
            f"{repeated:,} twice (stats.dropped_documents, stats.repeated_documents)"
        )
    opened, waited = opening  # the corpus's open: its index walk, and the servers' Retry-After
    if opened >= 1.0 or waited > 0:
        line += f"; opening the corpus took {opened:.2f} s"
        if waited > 0:
            line += f" ({waited:.2f} s of it waiting for the servers' Retry-After)"
    print(line, file=sys.stderr)
    for name in stats.skipped[:20]:
        print(f"  skipped: {name}", file=sys.stderr)


def delivered(
    iterator: DocumentIterator | MixtureIterator, written: Mark | MixMark | None
) -> Stats:
    """What reached the sink: with ``--jsonl`` the documents, text and ids of the lines
    written (``written``: the mark after the last one), not those handed out after it; a
    mixture's per part too (its mark: a mark per part, in order)."""
    stats = iterator.stats
    if written is None:
        return stats
    marks = written.parts if isinstance(written, MixMark) else (written,)
    return _recounted(stats, [mark.counted() for mark in marks])


def at_state(stats: Stats, documents: DocumentState | MixtureState) -> Stats:
    """``stats`` with the documents, text and ids of the counters of ``documents`` (a batches
    state's, each part's too): where a resumed run of batches starts counting (its packer may
    have read ahead by then, a best-fit window again)."""
    if isinstance(documents, DocumentState):
        return _recounted(stats, [documents.counters])
    return _recounted(stats, [documents.parts[name].counters for name in documents.config.parts])


def _recounted(stats: Stats, each: Sequence[Counters]) -> Stats:
    """``stats`` with the documents, text and ids of ``each``: a corpus's one, or a mixture's
    parts' in its order (each part's, and their sum)."""

    def of(stats: Stats, counted: Sequence[Counters]) -> Stats:
        keys = ("documents", "text_bytes", "tokens")
        return codec.replace(stats, **{k: sum(getattr(c, k) for c in counted) for k in keys})

    if not isinstance(stats, MixtureStats):
        return of(stats, each)
    parts = {name: of(part, [c]) for (name, part), c in zip(stats.parts.items(), each, strict=True)}
    return codec.replace(of(stats, each), parts=parts)


def save_state(path: Path, state: dict[str, Any], *, run_failed: bool) -> None:
    """Write the state; a failure to do so never hides the error that ended the run."""
    try:
        atomic_write(path, json.dumps(state, indent=1) + "\n")
    except (OSError, OWTError) as exc:
        said = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        if not run_failed:
            raise OutputError(f"cannot write the state to {path}: {said}") from exc
        print(f"owt: error: cannot write the state to {path}: {said}", file=sys.stderr)


def _state_bytes(path: str) -> bytes:
    """The bytes of a ``--resume`` file, read once (a pipe's too: ``/dev/stdin``, ``<(…)``, a
    FIFO: a second open would find it empty, or wait for a writer), at most
    ``MOST_STATE_BYTES``; a device or a folder refused."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
                raise StateError(f"{path}: is a device, not a state file")
            data = codec.read_at_most(f, MOST_STATE_BYTES)
    except OSError as exc:
        raise StateError(f"{path}: cannot read the state: {exc.strerror or exc}") from exc
    if len(data) > MOST_STATE_BYTES:
        raise StateError(f"{path}: too large to be a state (more than {MOST_STATE_BYTES:,} bytes)")
    return data


def read_state(path: str) -> DocumentState | MixtureState | BatchesState:
    """A ``--resume`` file: a corpus's state, a mixture's, or batches' (``--pack``)."""
    state: DocumentState | MixtureState | BatchesState = load_state(
        path, _state_bytes(path), any_kind=True
    )
    return state


def packing_summary(args: argparse.Namespace, stats: Stats, before: Stats, made: int) -> None:
    """What packing did: the batches, their padding, the documents cut and their pieces."""
    ids = made * args.batch_size * (args.seq_len + 1)
    padding = stats.padding_ids - before.padding_ids
    cut, pieces = stats.cut_documents - before.cut_documents, stats.pieces - before.pieces
    print(
        f"packed ({args.pack}) into {made:,} batch{'' if made == 1 else 'es'} of "
        f"{args.batch_size} x {args.seq_len + 1} ids: {plural(padding, 'padding id')} "
        f"({padding / max(ids, 1):.2%}), {plural(cut, 'document')} cut into "
        f"{plural(pieces, 'piece')}",
        file=sys.stderr,
    )


def parts_summary(stats: Any, before: Any, *, packed: bool = False) -> None:
    """A mixture's summary line per part: its documents, text and ids since ``before`` (the
    stats at the run's start: a resumed run's, its state's), as the documents line counts, its
    epoch, what it skipped, and of ``packed`` batches the part's documents cut and their pieces
    (padding belongs to no part: the packing line says the rank's)."""
    for name, part in stats.parts.items():
        was = before.parts.get(name)
        keys = ("documents", "text_bytes", "tokens", "cut_documents", "pieces", "skipped_members",
                "skipped_documents", "partial_members")  # fmt: skip
        since = {k: getattr(part, k) - (0 if was is None else getattr(was, k)) for k in keys}
        tail = ""  # (its skips, then what packing cut)
        if since["skipped_members"] or since["skipped_documents"] or since["partial_members"]:
            tail = (f"; skipped {plural(since['skipped_members'], 'member')}, "
                    f"{plural(since['skipped_documents'], 'document')}, "
                    f"{plural(since['partial_members'], 'member')} cut short")  # fmt: skip
        if packed:
            tail += (f"; {plural(since['cut_documents'], 'document')} cut into "
                     f"{plural(since['pieces'], 'piece')}")  # fmt: skip
        print(
            f"  {name}: {plural(since['documents'], 'document')}, "
            f"{since['text_bytes'] / 1e6:.1f} MB, in epoch {stats.epochs[name]}"
            + (f", {since['tokens']:,} ids" if since["tokens"] else "")
            + tail,
            file=sys.stderr,
        )
