"""``merge``: join slices written by ``prepare(..., shard=…)`` into exactly the files one
run would write, once their configs agree and their positions tile every unit once."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from openwebtext import codec
from openwebtext.errors import StateError
from openwebtext.index import refuse_corpus_folder
from openwebtext.options import check_max_errors
from openwebtext.policy import MEMBER_COUNTERS, SkipPolicy
from openwebtext.prepare import outputs
from openwebtext.prepare.config import BINS, Progress, Report, difference
from openwebtext.prepare.lock import confirm, hold, hold_to_read
from openwebtext.prepare.meta import read_meta
from openwebtext.prepare.permute import permute
from openwebtext.prepare.record import Passes, Run, drive, open_record
from openwebtext.prepare.run import check_run_arguments, written
from openwebtext.prepare.state import (
    Counts,
    Meta,
    Piece,
    ProgressRecord,
    RunConfig,
    Slice,
)
from openwebtext.prepare.workdir import PrepareError, Workdir
from openwebtext.source import Storage

__all__ = ["merge"]


def merge(
    folders: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    restart: bool = False,
    progress: Callable[[Progress], None] | None = None,
    checkpoint_seconds: float = 2.0,
    storage: Storage | None = None,
    max_errors: int | None = None,
    verify: bool = True,
    wait: bool = False,
) -> Report:
    """Join slices written by ``prepare(..., shard=…)`` into the files one run would write.

    ``folders`` and ``out`` may be URLs (``prepare``): remote slices are downloaded to local
    staging folders first (the merge reads them by offset), and the files are built in a
    local staging folder, then uploaded, ``meta.json`` last. Their filesystems are made
    with ``storage`` (e.g. the corpus's ``Corpus.storage``; None: the process's default,
    ``source.configure``). ``max_errors``: refuse, before writing anything, slices whose
    skips add up to more than this (``policy.SkipPolicy``: the bound of the whole run that
    wrote them; None: no bound).

    A local slice is read holding its folder's lock (unless none can be taken: a read-only
    folder): a run writing into it (``owt tokenize --out`` of it, again) is refused or waited
    for (``wait``), and one started meanwhile is refused, rather than read half-written.

    ``verify``: before a slice's files are read, check that each still has the sha256 its
    ``meta.json`` records (a file changed in place, at the same size, is refused). This reads
    every slice once more, at about the speed of the disk: some 30 s for the 17 GB of a full
    GPT-2 run. False (``owt merge --no-verify``) skips it, for slices known to be intact;
    sizes are checked either way. A merge already finished reads nothing. ``wait``: if
    another run is writing into ``out``, wait for it rather than fail at once (``--wait``).

    Raises:
        PrepareError: a folder is not a slice; slices of different corpora or options; a
            slice missing, given twice, or overlapping another; a slice's file of the wrong
            size, or (``verify``) not its sha256; a slice in use by another run (not
            ``wait``); a download or upload failed.
        TooManyErrors: more skips in all than ``max_errors``.
        TypeError: ``folders`` is one path, not a list of them; a folder or ``out`` that is
            not a path or URL.
        ValueError: an empty folder or ``out``, or an ``out`` that holds corpus files;
            ``max_errors`` not None or an int >= 0; ``checkpoint_seconds`` not >= 0.
    """
    if isinstance(folders, str | os.PathLike):  # (its characters are no folders)
        raise TypeError("folders must be a list of the slices' folders, not one path")
    check_max_errors(max_errors)
    check_run_arguments(restart, progress, checkpoint_seconds, wait)
    if not isinstance(verify, bool):
        raise TypeError(f"verify must be a bool, not {verify!r}")
    locations = [outputs.location(f, "a slice's folder") for f in folders]
    target = outputs.location(out)
    refuse_corpus_folder(os.fspath(target))
    with contextlib.ExitStack() as held:
        for f in locations:  # a local slice: never read while a run writes it again
            if isinstance(f, Path):
                held.enter_context(hold_to_read(f, wait))
        found = [_slice_meta(f, storage) for f in locations]
        if not found:
            raise PrepareError("no slice to merge")
        metas = [meta for meta, _ in found]
        config = codec.replace(metas[0].config, slice=None)
        for folder, meta in zip(locations[1:], metas[1:], strict=True):
            other = codec.replace(meta.config, slice=None)
            if other != config:
                first = f"in {outputs.shown(locations[0])}"
                what = difference(other, config, first)
                raise PrepareError(
                    f"cannot merge slices of different runs: {outputs.shown(folder)} is of {what}"
                )
        ordered = _check_tiling(locations, found, config.units)
        for folder in locations:
            if outputs.same_place(folder, target):
                raise PrepareError(
                    f"cannot merge into {outputs.shown(target)}: it is one of the slices being "
                    "merged; give another --out"
                )
        SkipPolicy("skip", max_errors).check(_skips(metas).skips)
        run = (config, ordered, restart, progress, checkpoint_seconds, storage, verify)
        build = lambda folder: _merge_in(folder, *run)  # noqa: E731
        copies = [outputs.staging(f, "fetch") for f, _ in ordered if isinstance(f, str)]
        for copy in copies:  # another merge of the same remote slice shares its local copy
            held.enter_context(hold(copy, wait))
        report = written(target, config, restart, storage, build, wait)
        for copy in copies:  # done: the local copies of remote slices go, for any target
            outputs.remove(copy)
        return report


def _merge_in(
    folder: Path,
    config: RunConfig,
    ordered: list[tuple[outputs.Location, Meta]],
    restart: bool,
    progress: Callable[[Progress], None] | None,
    checkpoint_seconds: float,
    storage: Storage | None,
    verify: bool,
) -> Report:
    """``merge`` into the local folder ``folder``."""
    workdir = Workdir(folder, lambda: confirm(folder))

    # Remote slices are read from local copies (a copy already made of the same meta.json
    # is kept if it still matches it), made only when they are read; with ``verify``, every
    # slice's files are checked against their sha256 first.
    def local() -> list[tuple[Path, Meta]]:
        copies = []
        for f, m in ordered:
            if isinstance(f, str):
                copies.append((outputs.fetch(f, codec.encode(m), storage, verify), m))
                continue
            for name in outputs.mismatched(f, codec.encode(m)) if verify else []:
                raise PrepareError(
                    f"{f / name}: its sha256 is not the one its meta.json records (the file "
                    "changed after the slice was written); --no-verify skips this check"
                )
            copies.append((f, m))
        return copies

    if config.split_rule == "hash":
        return _merge_hashed(workdir, config, local(), progress, restart)
    shown = tuple(Piece(outputs.shown(f, resolve=True), m.files) for f, m in ordered)
    record_config = codec.replace(config, merge_of=shown)
    counts = Counts.new(("train", "val"))
    fresh = lambda: ProgressRecord(record_config, "tokenize", counts)  # noqa: E731
    record, resumed = open_record(workdir, record_config, restart, fresh)

    def gather(run: Run) -> None:  # pass 1 was the slices': only their skips add up here
        run.counts = _skips([m for _, m in ordered])

    def second(run: Run) -> None:
        pairs = [(f / "tokens.bin", f / "lengths.bin") for f, _ in local()]
        itemsize = np.dtype(config.dtype).itemsize
        permute(run, pairs, itemsize, config.val_fraction, config.val_seed)

    run = Run(workdir, record, progress, checkpoint_seconds)
    meta = drive(run, Passes(tokenize=gather, permute=second, finals=BINS))
    return Report(workdir.folder, codec.encode(meta), resumed)


def _skips(metas: list[Meta]) -> Counts:
    """A merge's new counts, with the skips of the whole run the slices are of: their
    members' and documents' added up; the corpus's skipped files once (every slice counts the
    same ones)."""
    skips = {key: sum(getattr(m.counts, key) for m in metas) for key in MEMBER_COUNTERS}
    files = max(m.counts.skipped_files for m in metas)
    return codec.replace(Counts.new(("train", "val"), files), **skips)


def _slice_meta(folder: outputs.Location, store: Storage | None) -> tuple[Meta, Slice]:
    """A slice's meta.json, checked, and its positions."""
    body = read_meta(folder, store)
    shown = outputs.shown(folder)
    if not body:  # (a meta.json of another format is said by its field below)
        raise PrepareError(
            f"{shown} is not a slice of `owt tokenize --shard i/n` (no meta.json of one)"
        )
    try:
        meta = Meta.from_json(body)
    except StateError as exc:
        raise PrepareError(
            f"{outputs.shown(outputs.join(folder, 'meta.json'))} is damaged: {exc}"
        ) from None
    piece = meta.config.slice
    if piece is None:
        raise PrepareError(f"{shown} is not a slice of `owt tokenize --shard i/n` (a complete run)")
    files = meta.files
    found = outputs.sizes(folder, list(files), store)
    for name, info in files.items():
        if found[name] != info.bytes:
            holds = f"holds {found[name]} bytes"
            if found[name] < 0:  # (``outputs.sizes``: missing, or no regular file)
                holds = "is missing or not a regular file"
            raise PrepareError(
                f"{outputs.shown(outputs.join(folder, name))} {holds}, not the {info.bytes} bytes "
                "of its meta.json"
            )
    return meta, piece


def _describe(piece: Slice) -> str:
    if piece.shard:
        return f"shard {piece.shard.index}/{piece.shard.count}"
    return f"units [{piece.start}, {piece.stop})"


def _check_tiling(
    folders: list[outputs.Location], found: list[tuple[Meta, Slice]], units: int
) -> list[tuple[outputs.Location, Meta]]:
    """The slices in position order, if they cover ``[0, units)`` exactly once."""
    ordered = sorted(zip(folders, found, strict=True), key=lambda fs: fs[1][1].start)
    pieces = [piece for _, (_, piece) in ordered]
    end = 0
    for k, (folder, (_, piece)) in enumerate(ordered):
        if piece.start < end:
            earlier = ordered[k - 1]
            if pieces[k - 1] == piece:
                first, shown = outputs.shown(earlier[0]), outputs.shown(folder)
                raise PrepareError(f"{_describe(piece)} is given twice: {first} and {shown}")
            shown, first = outputs.shown(folder), outputs.shown(earlier[0])
            raise PrepareError(f"{shown} ({_describe(piece)}) overlaps {first}")
        if piece.start > end:
            missing = f"units [{end}, {piece.start}){_missing(pieces)}"
            raise PrepareError(f"a slice is missing: {missing}")
        end = piece.stop
    if end > units:  # Meta.from_json refuses this: a slice's positions lie within its units
        shown = outputs.shown(ordered[-1][0])
        raise PrepareError(f"{shown} ({_describe(pieces[-1])}) ends past the {units} units")
    if end != units:
        raise PrepareError(f"a slice is missing: units [{end}, {units}){_missing(pieces)}")
    return [(folder, meta) for folder, (meta, _) in ordered]


def _missing(pieces: list[Slice]) -> str:
    """Which shards ``--shard i/n`` did not give, when every slice is a shard of the same n."""
    shards = [piece.shard for piece in pieces if piece.shard is not None]
    counts = {shard.count for shard in shards}
    if len(counts) != 1:
        return ""
    (count,) = counts
    missing = sorted(set(range(count)) - {shard.index for shard in shards})
    return f" (shard {', '.join(f'{i}/{count}' for i in missing)} of {count})" if missing else ""


def _merge_hashed(
    workdir: Workdir,
    config: RunConfig,
    ordered: list[tuple[Path, Meta]],
    progress: Callable[[Progress], None] | None,
    restart: bool,
) -> Report:
    """Concatenate the slices' train.bin and val.bin (a hash split is decided per document).
    A copy is quick to redo: it is never resumed, and leaves nothing behind when it fails; the
    progress of another run in the folder is refused (``restart``: thrown away), as by every
    run."""
    counts = _skips([m for _, m in ordered])
    for _, meta in ordered:
        for split in ("train", "val"):
            documents, tokens = meta.counts.documents, meta.counts.tokens
            counts = counts.add(split, documents[split], tokens[split])
    total = sum(m.files[n].bytes for _, m in ordered for n in BINS)

    def copy(run: Run) -> None:
        done = 0
        workdir.clear()
        try:
            for name in BINS:
                part = workdir.part(name)
                try:
                    for folder, _ in ordered:
                        with os.fdopen(codec.open_regular(folder / name), "rb") as f:
                            shutil.copyfileobj(f, part, 8 << 20)  # (Part.write: counted)
                        done += (folder / name).stat().st_size
                        if progress is not None:
                            progress(Progress("copy", done, total, 0))
                    part.sync()
                finally:
                    part.close()
        except BaseException:
            workdir.clear()
            raise

    record = ProgressRecord(config, "tokenize", counts)
    open_record(workdir, config, restart, lambda: record)  # (its own: redone from the start)
    run = Run(workdir, record, progress, 0)
    meta = drive(run, Passes(tokenize=copy, permute=None, finals=BINS))
    return Report(workdir.folder, codec.encode(meta))
