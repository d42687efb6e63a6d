"""Prepare nanoGPT-style token files (``owt tokenize``, ``owt merge``): resumable, shardable.

A run writes ``OUT/train.bin`` and ``OUT/val.bin`` (every document's ids, then the
end-of-text id, as flat arrays of the tokenizer's dtype: uint16 for GPT-2) and
``OUT/meta.json`` (the options, the counts, and each file's size and sha256).

Two split rules (``PrepareOptions.split``):

- ``hash`` (the default): a document is held out when a keyed hash of its name falls below
  ``val_fraction`` (``plan.in_validation``, the same rule as ``Options(split="val")``).
  Units are taken in the order of ``plan.plan`` (shuffled by ``seed`` unless ``shuffle`` is
  False), documents in archive order within a unit. One pass, no temporary copy.
- ``nanogpt``: byte-identical to nanoGPT's ``data/openwebtext/prepare.py`` reading the same
  archives through the Hugging Face ``openwebtext`` loading script. Documents in corpus
  order (files sorted by name, members and documents in archive order), each text
  ``read.nanogpt_text(text)``; ``n_val = ceil(val_fraction * n)``,
  ``perm = numpy.random.default_rng(val_seed).permutation(n)``, val.bin holds documents
  ``perm[:n_val]`` and train.bin ``perm[n_val:]``, each in permutation order. Two passes:
  tokenize in corpus order into ``.tokens.bin.part`` (recording each document's length),
  then copy in permutation order. Memory: 24 bytes per document; temporary disk: the size
  of the output plus 8 bytes per document.

Both survive interruption (``workdir``): run again with the same arguments and the run goes
on from its last checkpoint; the files are the same as an uninterrupted run's.

Slices: ``prepare(..., start=, stop=)`` (or ``shard=(i, n)``) does positions
``[start, stop)`` of ``unit_order`` only, into a folder of its own (``hash``: its train.bin
and val.bin; ``nanogpt``: ``tokens.bin`` and ``lengths.bin`` in corpus order, since the
permutation needs every document). ``merge`` joins slices that tile every position into
exactly the files one run would have written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from openwebtext.engine import Loaded, Pool, PoolOptions, open_pool
from openwebtext.errors import CorruptDocument, OWTError, TooManyErrors, TruncatedMember
from openwebtext.index import Corpus
from openwebtext.options import ErrorPolicy
from openwebtext.plan import in_validation, plan
from openwebtext.prepare import outputs
from openwebtext.prepare.workdir import PrepareError, Workdir, sha256_file
from openwebtext.source import Storage
from openwebtext.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "FORMAT",
    "SPLITS",
    "PrepareError",
    "PrepareOptions",
    "Progress",
    "Report",
    "finished",
    "merge",
    "prepare",
    "shard_range",
    "unit_order",
]

FORMAT = "openwebtext-prepare/1"
SPLITS = ("hash", "nanogpt")
SplitRule = Literal["hash", "nanogpt"]

_BINS = ["train.bin", "val.bin"]
_CORPUS_ORDER = ["tokens.bin", "lengths.bin"]  # a nanogpt slice, or pass 1 of a whole run
_LENGTH = np.dtype("<i8")
_CHUNK = 1 << 16  # documents copied between two looks at the clock in pass 2


@dataclass(frozen=True)
class PrepareOptions:
    """What a prepare run writes. Every field but ``workers`` shapes the files.

    Attributes:
        split: ``hash`` (keyed hash of the name) or ``nanogpt`` (byte-identical to nanoGPT).
        tokenizer: A tokenizer spec (``openwebtext.tokenizer``).
        workers: Worker processes (0: in this process).
        seed: ``hash``: the unit order's seed.
        shuffle: ``hash``: shuffle the units (else corpus order).
        val_fraction: ``hash``: the held-out share; ``nanogpt``: ``test_size``.
        val_seed: ``hash``: the hash's key; ``nanogpt``: the permutation's seed.
        take: Stop after this many documents (in the order documents are tokenized).
        on_error: ``raise``, or ``skip`` / ``warn`` bad members and documents (counted).
        max_errors: With skip or warn, fail past this many skips (None: no bound).
    """

    split: SplitRule = "hash"
    tokenizer: str = "gpt2"
    workers: int = 2
    seed: int = 0
    shuffle: bool = True
    val_fraction: float = 0.0005
    val_seed: int = 2357
    take: int | None = None
    on_error: ErrorPolicy = "raise"
    max_errors: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.split in SPLITS, f"split must be 'hash' or 'nanogpt', not {self.split!r}"),
            (_is_int(self.workers) and self.workers >= 0, f"workers must be >= 0: {self.workers}"),
            (_is_int(self.seed) and 0 <= self.seed < 2**64, f"seed: 0..2**64-1, {self.seed}"),
            (
                isinstance(self.val_fraction, (int, float)) and 0 < self.val_fraction < 1,
                f"val_fraction must be between 0 and 1, not {self.val_fraction!r}",
            ),
            (
                _is_int(self.val_seed) and 0 <= self.val_seed < 2**64,
                f"val_seed must be in 0..2**64-1, not {self.val_seed!r}",
            ),
            (self.take is None or (_is_int(self.take) and self.take >= 0), f"take: {self.take}"),
            (self.on_error in ("raise", "skip", "warn"), f"on_error: not {self.on_error!r}"),
            (
                self.max_errors is None or (_is_int(self.max_errors) and self.max_errors >= 0),
                f"max_errors must be None or >= 0, not {self.max_errors!r}",
            ),
        ]  # fmt: skip
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Progress(NamedTuple):
    """A progress event: ``phase`` ``tokenize`` (``done``/``total`` in compressed bytes of
    units), ``permute`` or ``copy`` (in bytes written); ``tokens`` written in this phase."""

    phase: str
    done: int
    total: int
    tokens: int


@dataclass(frozen=True)
class Report:
    """What a run wrote.

    Attributes:
        out: The output folder, or its URL.
        meta: The ``meta.json`` written (options, counts, files with their sha256).
        resumed: The run went on from another run's progress.
        already: The folder already held these files; nothing was done.
        skipped: Messages of the members and documents skipped by this process.
    """

    out: Path | str
    meta: dict[str, Any]
    resumed: bool = False
    already: bool = False
    skipped: tuple[str, ...] = ()


def unit_order(corpus: Corpus, options: PrepareOptions) -> list[int]:
    """The units in the order their documents are tokenized.

    ``nanogpt``: files sorted by name (then path), members in archive order, as the loading
    script reads ``urlsf_subset00.tar`` … ``urlsf_subset20.tar``. ``hash``: ``plan.plan``.
    """
    units = corpus.units
    if options.split == "nanogpt":
        return sorted(
            range(len(units)),
            key=lambda u: (os.path.basename(units[u].path), units[u].path, units[u].member_index),
        )
    return plan(len(units), shuffle=options.shuffle, seed=options.seed)


def shard_range(positions: int, index: int, count: int) -> tuple[int, int]:
    """Positions ``[start, stop)`` of slice ``index`` of ``count`` (sizes differ by at most 1)."""
    if not (_is_int(count) and count >= 1 and _is_int(index) and 0 <= index < count):
        raise ValueError(f"a shard is i/n with 0 <= i < n, not {index}/{count}")
    return index * positions // count, (index + 1) * positions // count


def _config(corpus: Corpus, options: PrepareOptions, tokenizer: Tokenizer) -> dict[str, Any]:
    """What the files depend on: two runs with the same config write the same bytes."""
    config: dict[str, Any] = {
        "format": FORMAT,
        "split": options.split,
        "corpus": corpus.fingerprint(),
        "units": len(corpus.units),
        "tokenizer": tokenizer.spec,
        "fingerprint": tokenizer.fingerprint,
        "dtype": tokenizer.dtype.name,
        "eot": tokenizer.eot,
        "n_vocab": tokenizer.n_vocab,
        "val_fraction": options.val_fraction,
        "val_seed": options.val_seed,
        "take": options.take,
        "on_error": options.on_error,
    }
    if options.split == "hash":
        config.update(seed=options.seed, shuffle=options.shuffle)
    return config


_CONFIG_KEYS = ("format", "split", "corpus", "units", "tokenizer", "fingerprint", "dtype", "eot",
                "n_vocab", "val_fraction", "val_seed", "take", "on_error", "seed", "shuffle",
                "slice", "merge_of")  # fmt: skip


def _difference(saved: dict[str, Any], wanted: dict[str, Any], other: str = "now") -> str:
    """Say how two configs differ, in words (``other`` names where ``wanted`` comes from)."""
    if saved.get("corpus") != wanted.get("corpus") or saved.get("units") != wanted.get("units"):
        return (
            f"a different corpus (fingerprint {saved.get('corpus')}, {saved.get('units')} "
            f"members; {other}: {wanted.get('corpus')}, {wanted.get('units')} members)"
        )
    keys = [k for k in _CONFIG_KEYS if saved.get(k) != wanted.get(k)]
    what = ", ".join(f"{k} {saved.get(k)!r} ({other}: {wanted.get(k)!r})" for k in keys)
    return f"different options: {what}"


def _open_pool(corpus: Corpus, options: PrepareOptions, tokenizer: Tokenizer) -> Pool:
    """The pool, with the loader's defaults for everything prepare does not choose."""
    pool_options = PoolOptions(
        workers=options.workers,
        retries=0 if options.on_error == "raise" else 1,
        tokenizer=tokenizer,  # ``options.tokenizer``, resolved once by ``prepare``
        normalise=options.split == "nanogpt",
    )
    return open_pool(corpus.units, pool_options, corpus.storage)


class _Run:
    """One prepare or merge run in a ``Workdir``: its record, checkpoints and counts."""

    def __init__(
        self,
        workdir: Workdir,
        record: dict[str, Any],
        progress: Callable[[Progress], None] | None,
        checkpoint_seconds: float,
    ) -> None:
        self.workdir = workdir
        self.record = record
        self.progress = progress or (lambda event: None)
        self.checkpoint_seconds = checkpoint_seconds
        self.skipped: list[str] = []

    @property
    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = self.record["counts"]
        return counts

    def checkpoint(self, parts: dict[str, Any], **fields: Any) -> None:
        """Sync ``parts``, then record their sizes with ``fields`` (never the other order)."""
        sizes = {name: part.sync() for name, part in parts.items()}
        self.record = {**self.record, **fields, "sizes": sizes}
        self.workdir.save(self.record)

    def error(self, error: OWTError, options: PrepareOptions) -> None:
        """Apply the error policy to one bad member or document."""
        if options.on_error == "raise":
            raise error
        if isinstance(error, TruncatedMember):  # its documents before the cut are kept
            key = "partial_members"
        elif isinstance(error, CorruptDocument):
            key = "skipped_documents"
        else:
            key = "skipped_members"
        self.counts[key] += 1
        self.skipped.append(str(error))
        if options.on_error == "warn":
            logging.getLogger("openwebtext").warning("skipped: %s", error)
        skips = sum(self.counts[k] for k in _SKIPS)
        if options.max_errors is not None and skips > options.max_errors:
            raise TooManyErrors(f"{skips} skipped, more than max_errors={options.max_errors}")


_SKIPS = ("skipped_members", "skipped_documents", "partial_members")


def _new_counts(keys: Sequence[str]) -> dict[str, Any]:
    return {"documents": dict.fromkeys(keys, 0), "tokens": dict.fromkeys(keys, 0),
            **dict.fromkeys(_SKIPS, 0)}  # fmt: skip


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

    Returns:
        A ``Report`` with the ``meta.json`` written.

    Raises:
        PrepareError: ``out`` holds the progress of another corpus or other options, or
            an upload failed.
        CorpusError: a bad member or document under ``on_error="raise"``.
        TokenizerError: the tokenizer cannot be loaded.
    """
    options = options or PrepareOptions()
    tokenizer = load_tokenizer(options.tokenizer)
    order = unit_order(corpus, options)
    if shard is not None:
        start, stop = shard_range(len(order), *shard)
    stop = len(order) if stop is None else stop
    if not 0 <= start <= stop <= len(order):
        raise ValueError(f"unit positions [{start}, {stop}) are not within [0, {len(order)})")
    whole = shard is None and (start, stop) == (0, len(order))  # "--shard 0/1" is a slice
    if not whole and options.take is not None:
        raise ValueError("take applies to a whole run, not to a slice")
    config = _config(corpus, options, tokenizer)
    if not whole:
        config["slice"] = {"start": start, "stop": stop, "shard": list(shard) if shard else None}
    work = _Work(corpus, options, tokenizer, order, stop, config, progress, checkpoint_seconds)
    # The output is written with the options the input was opened with.
    return _written(
        outputs.location(out),
        config,
        restart,
        corpus.storage,
        lambda folder: _prepare_in(folder, work, restart),
    )


def _written(
    target: outputs.Location,
    config: dict[str, Any],
    restart: bool,
    store: Storage | None,
    build: Callable[[Path], Report],
) -> Report:
    """``build`` the files of ``config`` in ``target``: in place for a local folder; for a
    URL, in its staging folder (which resumes a staged run), then published there, unless
    the URL already holds them."""
    if isinstance(target, Path):
        return build(target)
    if not restart and _finished(target, config, store):
        return Report(target, _read_meta(target, store), already=True)
    folder = outputs.staging(target)
    report = build(folder)
    meta = outputs.publish(folder, target, store)
    return dataclasses.replace(report, out=target, meta=meta, already=False)


class _Work(NamedTuple):
    """What ``prepare`` does, whatever folder it does it in."""

    corpus: Corpus
    options: PrepareOptions
    tokenizer: Tokenizer
    order: list[int]
    stop: int
    config: dict[str, Any]
    progress: Callable[[Progress], None] | None
    checkpoint_seconds: float


def _prepare_in(folder: Path, work: _Work, restart: bool) -> Report:
    """``prepare`` into the local folder ``folder``."""
    corpus, options, tokenizer, order, stop, config, progress, checkpoint_seconds = work
    whole = "slice" not in config
    workdir = Workdir(folder)
    names = _BINS if options.split == "hash" else _CORPUS_ORDER
    finals = names if (options.split == "hash" or not whole) else _BINS
    record, resumed = _start(workdir, config, restart, names + _BINS)
    if record is None:
        return Report(workdir.folder, _read_meta(workdir.folder), already=True)
    run = _Run(workdir, record, progress, checkpoint_seconds)
    if record["phase"] == "tokenize":
        _tokenize(run, corpus, options, tokenizer, order, stop, names)
        if finals is _BINS and names is _CORPUS_ORDER:
            run.record = {**run.record, "phase": "permute", "position": 0, "sizes": {}}
            workdir.save(run.record)
    if run.record["phase"] == "permute":
        sources = [(workdir.part_path("tokens.bin"), workdir.part_path("lengths.bin"))]
        _permute(run, sources, tokenizer.dtype.itemsize, options.val_fraction, options.val_seed)
    if run.record["phase"] != "commit":
        run.record["meta"] = _meta(workdir, run.record, finals)
    drop = [n for n in names if n not in finals]
    workdir.commit(run.record, finals, drop)
    return Report(workdir.folder, run.record["meta"], resumed, skipped=tuple(run.skipped))


def _start(
    workdir: Workdir, config: dict[str, Any], restart: bool, names: list[str]
) -> tuple[dict[str, Any] | None, bool]:
    """The record to go on from (a new one if none), and whether it is an earlier run's.

    None: the folder already holds the finished files of this config.
    """
    if restart:
        workdir.clear(names)
    record = workdir.load()
    if record is not None:
        if record["config"] != config:
            what = _difference(record["config"], config)
            raise PrepareError(
                f"{workdir.folder} holds the progress of a run of {what}: run the same command "
                "as before to go on, or add --restart to throw that progress away"
            )
        return record, True
    if not restart and _finished(workdir.folder, config):
        return None, False
    keys = ["all"] if config["split"] == "nanogpt" and "slice" in config else ["train", "val"]
    start = config.get("slice", {}).get("start", 0)
    fresh = {"config": config, "phase": "tokenize", "position": start, "sizes": {},
             "counts": _new_counts(keys)}  # fmt: skip
    return fresh, False


def finished(corpus: Corpus, out: str | os.PathLike[str], options: PrepareOptions) -> bool:
    """Whether ``out`` already holds the finished files of a whole run of ``corpus``/``options``.

    Lets an engine that prepares slices elsewhere (``openwebtext.ray``) skip a run already done.
    """
    config = _config(corpus, options, load_tokenizer(options.tokenizer))
    return _finished(outputs.location(out), config, corpus.storage)


def _read_meta(folder: outputs.Location, store: Storage | None = None) -> dict[str, Any]:
    return outputs.read_json(folder, "meta.json", store) or {}


def _finished(
    folder: outputs.Location, config: dict[str, Any], store: Storage | None = None
) -> bool:
    """Whether ``folder`` holds the finished files of ``config`` (their sizes checked)."""
    meta = _read_meta(folder, store)
    if {k: meta.get(k) for k in config} != config or not isinstance(meta.get("files"), dict):
        return False
    try:
        found = outputs.sizes(folder, list(meta["files"]), store)
        return all(found[name] == info["bytes"] for name, info in meta["files"].items())
    except (OSError, KeyError, TypeError):
        return False


def _meta(workdir: Workdir, record: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """meta.json: the config (of a whole run, after a merge), the counts, each file's sha256."""
    files = {}
    for name in names:
        path = workdir.part_path(name)
        files[name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
    config = {k: v for k, v in record["config"].items() if k != "merge_of"}
    return {**config, **record["counts"], "files": files}


def _tokenize(
    run: _Run,
    corpus: Corpus,
    options: PrepareOptions,
    tokenizer: Tokenizer,
    order: list[int],
    stop: int,
    names: list[str],
) -> None:
    """Pass 1: tokenize units ``order[position:stop]`` in order, appending to the parts."""
    record = run.record
    position: int = record["position"]
    parts = {n: run.workdir.part(n, record["sizes"].get(n, 0)) for n in names}
    itemsize = tokenizer.dtype.itemsize
    counts = run.counts
    units = corpus.units
    first = record["config"].get("slice", {}).get("start", 0)
    total = sum(units[u].size for u in order[first:stop])
    done = total - sum(units[u].size for u in order[position:stop])
    take = options.take
    tokens_now = 0
    consistent = True  # the parts hold whole units only: a checkpoint may be taken now
    pool = _open_pool(corpus, options, tokenizer)
    try:
        last = time.monotonic()
        for loaded in pool.run(order[position:stop]):
            consistent = False
            budget = None if take is None else take - sum(counts["documents"].values())
            tokens_now += _write_unit(run, loaded, parts, itemsize, options, budget)
            position += 1
            done += units[loaded.unit].size
            consistent = True
            taken = take is not None and sum(counts["documents"].values()) >= take
            if taken or time.monotonic() - last >= run.checkpoint_seconds:
                run.checkpoint(parts, position=stop if taken else position)
                last = time.monotonic()
            run.progress(Progress("tokenize", done, total, tokens_now))
            if taken:
                break
        run.checkpoint(parts, position=stop)
    except BaseException:
        if consistent:  # e.g. Ctrl-C while waiting for the workers: keep every finished unit
            with contextlib.suppress(Exception):  # never hide why the run ended
                run.checkpoint(parts, position=position)
        raise
    finally:
        pool.close()
        for part in parts.values():
            part.close()


def _write_unit(
    run: _Run,
    loaded: Loaded,
    parts: dict[str, Any],
    itemsize: int,
    options: PrepareOptions,
    budget: int | None,
) -> int:
    """Apply the error policy to a unit's errors, then append its documents (at most
    ``budget``) to the parts, as the split rule says; the tokens written."""
    for error in loaded.errors:
        run.error(error, options)
    if loaded.counts is None:  # the whole unit failed, and was skipped
        return 0
    if options.split == "hash":
        return _write_hashed(run, loaded, loaded.counts, parts, itemsize, options, budget)
    return _write_in_order(run, loaded, loaded.counts, parts, itemsize, budget)


def _write_hashed(
    run: _Run,
    loaded: Loaded,
    id_counts: list[int],
    parts: dict[str, Any],
    itemsize: int,
    options: PrepareOptions,
    budget: int | None,
) -> int:
    """Append a unit's documents to train.bin or val.bin by the hash of their names."""
    counts = run.counts
    data = loaded.data
    tokens = 0
    fraction, seed = options.val_fraction, options.val_seed
    for name, offset, count in zip(loaded.names, loaded.offsets, id_counts, strict=True):
        if offset < 0:
            continue
        if budget is not None:
            if budget <= 0:
                break
            budget -= 1
        split = "val" if in_validation(name, fraction, seed) else "train"
        parts[f"{split}.bin"].write(data[offset : offset + count * itemsize])
        counts["documents"][split] += 1
        counts["tokens"][split] += count
        tokens += count
    return tokens


def _write_in_order(
    run: _Run,
    loaded: Loaded,
    id_counts: list[int],
    parts: dict[str, Any],
    itemsize: int,
    budget: int | None,
) -> int:
    """Append a unit's ids (its kept documents lie packed in ``data``) and their lengths."""
    lengths = [c for o, c in zip(loaded.offsets, id_counts, strict=True) if o >= 0]
    if budget is not None:
        lengths = lengths[:budget]
    tokens = sum(lengths)
    parts["tokens.bin"].write(loaded.data[: tokens * itemsize])
    parts["lengths.bin"].write(np.array(lengths, dtype=_LENGTH).tobytes())
    counts = run.counts
    key = next(iter(counts["documents"]))
    counts["documents"][key] += len(lengths)
    counts["tokens"][key] += tokens
    return tokens


def _permute(
    run: _Run,
    sources: Sequence[tuple[Path, Path]],
    itemsize: int,
    val_fraction: float,
    val_seed: int,
) -> None:
    """Pass 2: copy documents from ``sources`` (ids, lengths) in permutation order.

    As ``datasets.Dataset.train_test_split(test_size=val_fraction, seed=val_seed)``:
    ``n_val = ceil(val_fraction * n)``, val is ``perm[:n_val]``, train ``perm[n_val:]``.
    """
    lengths_per = [np.fromfile(lengths, dtype=_LENGTH) for _, lengths in sources]
    lengths = np.concatenate(lengths_per) if lengths_per else np.zeros(0, _LENGTH)
    n = len(lengths)
    n_val = math.ceil(val_fraction * n)
    perm = np.random.default_rng(val_seed).permutation(n)
    nbytes = lengths * itemsize
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(nbytes[:-1], out=starts[1:])
    # Where each source's documents begin, in the documents' global numbering and in bytes.
    first_doc = np.cumsum([0] + [len(x) for x in lengths_per])
    first_byte = starts[np.minimum(first_doc[:-1], max(n - 1, 0))] if n else np.zeros(1, np.int64)
    val_tokens = int(lengths[perm[:n_val]].sum())
    run.record["counts"] = {
        **run.counts,
        "documents": {"train": n - n_val, "val": n_val},
        "tokens": {"train": int(lengths.sum()) - val_tokens, "val": val_tokens},
    }
    total = int(nbytes.sum())
    position: int = run.record["position"]
    parts = {n: run.workdir.part(n, run.record["sizes"].get(n, 0)) for n in _BINS}
    fds = [os.open(tokens, os.O_RDONLY) for tokens, _ in sources]
    done = sum(parts[n].size for n in _BINS)
    try:
        last = time.monotonic()
        while position < n:
            end = min(position + _CHUNK, n if position >= n_val else n_val)
            part = parts["val.bin" if position < n_val else "train.bin"]
            docs = perm[position:end]
            source = np.searchsorted(first_doc, docs, side="right") - 1
            local = starts[docs] - first_byte[source]
            for s, offset, size in zip(
                source.tolist(), local.tolist(), nbytes[docs].tolist(), strict=True
            ):
                part.write(os.pread(fds[s], size, offset))
            done += int(nbytes[docs].sum())
            position = end
            if position == n or time.monotonic() - last >= run.checkpoint_seconds:
                run.checkpoint(parts, position=position)
                last = time.monotonic()
            run.progress(Progress("permute", done, total, done // itemsize))
        run.checkpoint(parts, position=n)
    finally:
        for fd in fds:
            os.close(fd)
        for p in parts.values():
            p.close()


def merge(
    folders: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    restart: bool = False,
    progress: Callable[[Progress], None] | None = None,
    checkpoint_seconds: float = 2.0,
    storage: Storage | None = None,
) -> Report:
    """Join slices written by ``prepare(..., shard=…)`` into the files one run would write.

    ``folders`` and ``out`` may be URLs (``prepare``): remote slices are downloaded to local
    staging folders first (the merge reads them by offset), and the files are built in a
    local staging folder, then uploaded, ``meta.json`` last. Their filesystems are made
    with ``storage`` (e.g. the corpus's ``Corpus.storage``; None: the process's default,
    ``storage.configure``).

    Raises:
        PrepareError: a folder is not a slice; slices of different corpora or options; a
            slice missing, given twice, or overlapping another; a slice's file of the wrong
            size; a download or upload failed.
    """
    locations = [outputs.location(f) for f in folders]
    metas = [_slice_meta(f, storage) for f in locations]
    if not metas:
        raise PrepareError("no slice to merge")
    config = {k: v for k, v in metas[0].items() if k in _CONFIG_KEYS and k != "slice"}
    for folder, meta in zip(locations[1:], metas[1:], strict=True):
        other = {k: v for k, v in meta.items() if k in _CONFIG_KEYS and k != "slice"}
        if other != config:
            what = _difference(other, config, f"in {outputs.shown(locations[0])}")
            raise PrepareError(
                f"cannot merge slices of different runs: {outputs.shown(folder)} is of {what}"
            )
    ordered = _check_tiling(locations, metas, config["units"])
    target = outputs.location(out)
    run = (config, ordered, restart, progress, checkpoint_seconds, storage)
    report = _written(target, config, restart, storage, lambda folder: _merge_in(folder, *run))
    for location, _ in ordered:  # done: the local copies of remote slices go, for any target
        if isinstance(location, str):
            outputs.remove(outputs.staging(location, "fetch"))
    return report


def _merge_in(
    folder: Path,
    config: dict[str, Any],
    ordered: list[tuple[outputs.Location, dict[str, Any]]],
    restart: bool,
    progress: Callable[[Progress], None] | None,
    checkpoint_seconds: float,
    storage: Storage | None,
) -> Report:
    """``merge`` into the local folder ``folder``."""
    workdir = Workdir(folder)

    # Remote slices are read from local copies (a copy already made of the same meta.json
    # is kept), made only when they are read.
    def local() -> list[tuple[Path, dict[str, Any]]]:
        return [(outputs.fetch(f, m, storage) if isinstance(f, str) else f, m) for f, m in ordered]

    if config["split"] == "hash":
        return _merge_hashed(workdir, config, local(), progress)
    shown = [[outputs.shown(f, resolve=True), m["files"]] for f, m in ordered]
    record_config = {**config, "merge_of": shown}
    record, resumed = _start(workdir, record_config, restart, _BINS)
    if record is None:
        return Report(workdir.folder, _read_meta(workdir.folder), already=True)
    if record["phase"] == "tokenize":
        counts = _new_counts(["train", "val"])
        for _, meta in ordered:
            for key in _SKIPS:
                counts[key] += meta[key]
        record = {**record, "phase": "permute", "position": 0, "sizes": {}, "counts": counts}
        workdir.save(record)
    run = _Run(workdir, record, progress, checkpoint_seconds)
    if record["phase"] == "permute":
        pairs = [(f / "tokens.bin", f / "lengths.bin") for f, _ in local()]
        itemsize = np.dtype(config["dtype"]).itemsize
        _permute(run, pairs, itemsize, config["val_fraction"], config["val_seed"])
    if run.record["phase"] != "commit":
        run.record["meta"] = _meta(workdir, run.record, _BINS)
    workdir.commit(run.record, _BINS, [])
    return Report(workdir.folder, run.record["meta"], resumed)


def _slice_meta(folder: outputs.Location, store: Storage | None) -> dict[str, Any]:
    meta = _read_meta(folder, store)
    if meta.get("format") != FORMAT or not isinstance(meta.get("slice"), dict):
        what = "a complete run" if meta.get("format") == FORMAT else "no meta.json of one"
        raise PrepareError(
            f"{outputs.shown(folder)} is not a slice of `owt tokenize --shard i/n` ({what})"
        )
    found = outputs.sizes(folder, list(meta["files"]), store)
    for name, info in meta["files"].items():
        if found[name] != info["bytes"]:
            raise PrepareError(
                f"{outputs.shown(outputs.join(folder, name))} holds {found[name]} bytes, not the "
                f"{info['bytes']} of its meta.json"
            )
    return meta


def _describe(meta: dict[str, Any]) -> str:
    piece = meta["slice"]
    if piece.get("shard"):
        return f"shard {piece['shard'][0]}/{piece['shard'][1]}"
    return f"units [{piece['start']}, {piece['stop']})"


def _check_tiling(
    folders: list[outputs.Location], metas: list[dict[str, Any]], units: int
) -> list[tuple[outputs.Location, dict[str, Any]]]:
    """The slices in position order, if they cover ``[0, units)`` exactly once."""
    ordered = sorted(zip(folders, metas, strict=True), key=lambda fm: fm[1]["slice"]["start"])
    end = 0
    for k, (folder, meta) in enumerate(ordered):
        piece = meta["slice"]
        if piece["start"] < end:
            earlier = ordered[k - 1]
            if earlier[1]["slice"] == piece:
                first, shown = outputs.shown(earlier[0]), outputs.shown(folder)
                raise PrepareError(f"{_describe(meta)} is given twice: {first} and {shown}")
            shown, first = outputs.shown(folder), outputs.shown(earlier[0])
            raise PrepareError(f"{shown} ({_describe(meta)}) overlaps {first}")
        if piece["start"] > end:
            missing = f"units [{end}, {piece['start']}){_missing(metas, end)}"
            raise PrepareError(f"a slice is missing: {missing}")
        end = piece["stop"]
    if end != units:
        raise PrepareError(f"a slice is missing: units [{end}, {units}){_missing(metas, end)}")
    return ordered


def _missing(metas: list[dict[str, Any]], start: int) -> str:
    shards = {tuple(m["slice"]["shard"]) for m in metas if m["slice"].get("shard")}
    counts = {n for _, n in shards}
    if len(counts) != 1:
        return ""
    (count,) = counts
    missing = sorted(set(range(count)) - {i for i, _ in shards})
    return f" (shard {', '.join(f'{i}/{count}' for i in missing)} of {count})" if missing else ""


def _merge_hashed(
    workdir: Workdir,
    config: dict[str, Any],
    ordered: list[tuple[Path, dict[str, Any]]],
    progress: Callable[[Progress], None] | None,
) -> Report:
    """Concatenate the slices' train.bin and val.bin (a hash split is decided per document)."""
    counts = _new_counts(["train", "val"])
    for _, meta in ordered:
        for key in ("documents", "tokens"):
            for split in ("train", "val"):
                counts[key][split] += meta[key][split]
        for key in _SKIPS:
            counts[key] += meta[key]
    total = sum(m["files"][n]["bytes"] for _, m in ordered for n in _BINS)
    done = 0
    workdir.clear(_BINS)
    try:
        for name in _BINS:
            part = workdir.part(name)
            try:
                for folder, _ in ordered:
                    with open(folder / name, "rb") as f:
                        shutil.copyfileobj(f, part.file, 8 << 20)
                    done += (folder / name).stat().st_size
                    if progress is not None:
                        progress(Progress("copy", done, total, 0))
                part.sync()
            finally:
                part.close()
    except BaseException:
        workdir.clear(_BINS)  # a copy is quick to redo: leave nothing behind
        raise
    record: dict[str, Any] = {"config": config, "phase": "commit", "counts": counts}
    record["meta"] = _meta(workdir, record, _BINS)
    workdir.commit(record, _BINS, [])
    return Report(workdir.folder, record["meta"])
