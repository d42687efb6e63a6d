"""``prepare``: a whole run or one slice of ``unit_order``, into a local folder in place or
into the staging folder of a URL (then published); ``written``, that choice, shared with
``merge``."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from openwebtext import codec
from openwebtext.index import Corpus, refuse_corpus_folder
from openwebtext.options import as_int, int_at_least
from openwebtext.plan import shard_range
from openwebtext.policy import SkipPolicy
from openwebtext.prepare import outputs
from openwebtext.prepare.config import (
    BINS,
    CORPUS_ORDER,
    PrepareOptions,
    Progress,
    Report,
    run_config,
    unit_order,
)
from openwebtext.prepare.lock import confirm, hold, hold_if_free
from openwebtext.prepare.meta import finished_run
from openwebtext.prepare.permute import permute
from openwebtext.prepare.record import Passes, Run, drive, open_record
from openwebtext.prepare.state import Counts, ProgressRecord, RunConfig, Shard, Slice
from openwebtext.prepare.workdir import PROGRESS, PrepareError, Workdir, untidy
from openwebtext.prepare.writers import tokenize_units
from openwebtext.source import Storage
from openwebtext.tokenizer import Tokenizer, load_tokenizer

__all__ = ["prepare", "tidy", "written"]


def prepare(
    corpus: Corpus,
    out: str | os.PathLike[str],
    options: PrepareOptions | None = None,
    *,
    start: int = 0,
    stop: int | None = None,
    shard: tuple[int, int] | None = None,
    restart: bool = False,
    progress: Callable[[Progress], None] | None = None,
    checkpoint_seconds: float = 2.0,
    wait: bool = False,
) -> Report:
    """Write ``train.bin``, ``val.bin`` and ``meta.json`` to ``out`` (or one slice of them).

    Goes on from the progress recorded in ``out`` by an interrupted run of the same corpus
    and options. A slice (``start``/``stop`` positions of ``unit_order``, or ``shard=(i, n)``)
    writes what ``merge`` needs instead.

    Args:
        corpus: The corpus.
        out: The output folder (created if needed), or a URL (``s3://bucket/prefix/``, any
            fsspec URL): the files are built in a local staging folder and uploaded at the
            end, ``meta.json`` last (``outputs``). The URL's filesystem is made with the
            corpus's options (``Corpus.open(..., storage_options=)``: ``Corpus.storage``).
        options: What to write.
        start: First position of ``unit_order`` to do.
        stop: Position after the last (None: the end).
        shard: ``(i, n)``: the positions of ``shard_range(len(units), i, n)``.
        restart: Throw away the progress recorded in ``out`` and start over.
        progress: Called with a ``Progress`` after every unit and chunk written.
        checkpoint_seconds: Seconds between two checkpoints (0: after every unit).
        wait: If another run is writing into ``out`` (its folder, or the staging folder of
            the URL), wait for it to end rather than fail at once (``--wait``).

    Returns:
        A ``Report`` with the ``meta.json`` written.

    Raises:
        PrepareError: ``out`` holds the progress of another corpus or other options, another
            run is writing into it (without ``wait``), or an upload failed.
        CorpusError: a bad member or document under ``on_error="raise"``.
        TokenizerError: the tokenizer cannot be loaded.
        TypeError: ``corpus`` is not a ``Corpus``, ``options`` not ``PrepareOptions``, ``out``
            not a path or URL; ``restart`` or ``wait`` not a bool, ``progress`` not callable.
        ValueError: ``out`` is empty, or the folder of the corpus's files; a slice (``start``,
            ``stop``, ``shard``) that is not one of the corpus; ``checkpoint_seconds`` not a
            number >= 0.
    """
    if not isinstance(corpus, Corpus):
        raise TypeError(f"corpus must be a Corpus (Corpus.open(paths)), not "
                        f"{type(corpus).__name__}")  # fmt: skip
    if options is not None and not isinstance(options, PrepareOptions):
        raise TypeError(f"options must be a PrepareOptions, not {type(options).__name__}")
    target = outputs.location(out)  # (checked before anything is read)
    refuse_corpus_folder(out, corpus.units)
    check_run_arguments(restart, progress, checkpoint_seconds, wait)
    options = options or PrepareOptions()
    tokenizer = load_tokenizer(options.tokenizer)
    order = unit_order(corpus, options)
    if shard is not None:
        if not isinstance(shard, tuple | list) or len(shard) != 2:
            raise ValueError(f"shard must be (index, count), not {shard!r}")
        shard = (as_int(shard[0]), as_int(shard[1]))  # (numpy's integers too, as every door)
        start, stop = shard_range(len(order), *shard)
    start, stop = as_int(start), len(order) if stop is None else as_int(stop)
    if not (int_at_least(start, 0) and int_at_least(stop, 0) and start <= stop <= len(order)):
        raise ValueError(f"unit positions [{start!r}, {stop!r}) are not ints within [0, "
                         f"{len(order)}]")  # fmt: skip
    whole = shard is None and (start, stop) == (0, len(order))  # "--shard 0/1" is a slice
    if not whole and options.take is not None:
        raise ValueError("take applies to a whole run, not to a slice")
    piece = Slice(start, stop, None if shard is None else Shard(*shard))
    config = run_config(corpus, options, tokenizer, None if whole else piece)
    work = _Work(corpus, options, tokenizer, order, stop, config, progress, checkpoint_seconds)
    # The output is written with the options the input was opened with.
    return written(
        target,
        config,
        restart,
        corpus.storage,
        lambda folder: _prepare_in(folder, work, restart),
        wait,
    )


def check_run_arguments(restart: object, progress: object, checkpoint_seconds: object,
                        wait: object) -> None:  # fmt: skip
    """Check the arguments ``prepare`` and ``merge`` share, before anything is read.

    Raises:
        TypeError: ``restart`` or ``wait`` not a bool, ``progress`` neither None nor callable.
        ValueError: ``checkpoint_seconds`` not a number >= 0 (NaN: a run that never saved its
            progress between units).
    """
    for name, value in (("restart", restart), ("wait", wait)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, not {value!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a callable taking a Progress, not "
                        f"{progress!r}")  # fmt: skip
    seconds = checkpoint_seconds
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < 1e9:
        raise ValueError(f"checkpoint_seconds must be a number of seconds >= 0, not "
                         f"{checkpoint_seconds!r}")  # fmt: skip


#: What a write into the output folder fails with when the disk (or a quota) is full.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


@contextlib.contextmanager
def said_full(folder: Path) -> Iterator[None]:
    """A full disk, a quota or a file-size limit met while writing into ``folder`` (a run's
    files, a format pass's) said of the file or the folder, not a bare errno.

    Raises:
        PrepareError: naming the file (or the folder), and that running again goes on.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        where = exc.filename if exc.filename else f"writing into {folder}"
        raise PrepareError(f"{where}: {exc.strerror or exc} (run the same command again to "
                           "go on)") from exc


def written(
    target: outputs.Location,
    config: RunConfig,
    restart: bool,
    store: Storage | None,
    build: Callable[[Path], Report],
    wait: bool = False,
) -> Report:
    """``build`` the files of ``config`` in ``target``: in place for a local folder; for a
    URL, in its staging folder (which resumes a staged run), then published there, unless
    the target already holds them. The folder built in is locked for the while (``lock``):
    another run into it is refused at once, or waited for (``wait``).

    A finished target is seen before the lock is taken, so a finished run on a read-only
    folder (a dataset on a read-only share) is "nothing to do", not a failure to create the
    lock file; what an interrupted run left beside it is swept (``Workdir.sweep``) under the
    lock if it can be taken at once (``tidy``). Under the lock, the folder is swept first,
    then the target is looked at again (the run waited for may have done it), and so is a
    staging folder whose finished files were not published yet."""
    folder = target if isinstance(target, Path) else outputs.staging(target)
    if not restart and (done := finished_run(target, config, store)) is not None:
        tidy(folder, None if folder == target else config)  # (the finished files stay)
        return done
    with hold(folder, wait):
        Workdir(folder).sweep()
        if not restart and (done := finished_run(target, config, store)) is not None:
            return done
        staged = None if restart or folder == target else finished_run(folder, config)
        with said_full(folder):
            report = build(folder) if staged is None else staged
        if isinstance(target, Path):
            return report
        confirm(folder)  # the staged files are still this run's
        meta = outputs.publish(folder, target, store)
    return dataclasses.replace(report, out=target, meta=meta, already=False)


def tidy(folder: Path, published: RunConfig | None = None) -> None:
    """Sweep what interrupted runs left in ``folder``, whose work is done (``Workdir.sweep``:
    no finished file goes), if it holds any and its lock can be taken at once: not on a
    read-only folder, nor while another run holds it (which sweeps it itself).

    ``published``: ``folder`` is the staging folder of a URL that holds the finished files
    of that config's run. The staging folder goes too if it holds them and no progress (a
    publish killed before it removed it); one holding another run's files or progress
    stays, for that run to go on from."""
    if not folder.is_dir() or (published is None and not untidy(folder)):
        return
    with hold_if_free(folder) as free:
        if not free:
            return
        Workdir(folder).sweep()
        if published is None or (folder / PROGRESS).exists():
            return
        if finished_run(folder, published) is not None:
            outputs.remove(folder)


class _Work(NamedTuple):
    """What ``prepare`` does, whatever folder it does it in."""

    corpus: Corpus
    options: PrepareOptions
    tokenizer: Tokenizer
    order: list[int]
    stop: int
    config: RunConfig
    progress: Callable[[Progress], None] | None
    checkpoint_seconds: float


def _prepare_in(folder: Path, work: _Work, restart: bool) -> Report:
    """``prepare`` into the local folder ``folder``."""
    corpus, options, tokenizer, order, stop, config, progress, checkpoint_seconds = work
    workdir = Workdir(folder, lambda: confirm(folder))
    # Pass 1 writes the split's files (``hash``) or the documents in corpus order
    # (``nanogpt``); a whole ``nanogpt`` run permutes those, a slice leaves that to ``merge``.
    names = BINS if options.split_rule == "hash" else CORPUS_ORDER
    permutes = options.split_rule == "nanogpt" and config.slice is None
    files = corpus.skipped_files
    fresh = lambda: ProgressRecord(  # noqa: E731
        config, "tokenize", Counts.new(config.splits(), len(files)), position=config.first
    )
    record, resumed = open_record(workdir, config, restart, fresh)
    policy = SkipPolicy(options.on_error, options.max_errors)
    run = Run(workdir, record, progress, checkpoint_seconds, policy)
    run.skipped += [str(error) for error in files]  # the files count as skips too
    policy.said(files)
    policy.check(run.counts.skips, files[-1] if files else None)

    def second(run: Run) -> None:
        sources = [(workdir.part_path("tokens.bin"), workdir.part_path("lengths.bin"))]
        permute(run, sources, tokenizer.dtype.itemsize, options.val_fraction, options.val_seed)

    passes = Passes(
        tokenize=lambda run: tokenize_units(run, corpus, options, tokenizer, order, stop, names),
        permute=second if permutes else None,
        finals=config.finals(),
    )
    meta = drive(run, passes)
    return Report(
        workdir.folder,
        codec.encode(meta),
        resumed,
        skipped=tuple(run.skipped),
        tokenized=run.tokenized,
    )
