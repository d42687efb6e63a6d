"""Ray engine: ``owt tokenize --engine ray`` and ``read_openwebtext`` (the ``ray`` extra).

Ray schedules; this module only cuts the work. Both entry points start from the same unit
index as the local engine (``Corpus.open``):

- ``tokenize`` cuts ``prepare.unit_order`` into slices of ``units_per_task`` units, runs
  ``prepare.prepare(..., shard=(i, n))`` for each slice as one Ray task (one CPU, no worker
  pool of its own) into ``OUT/.owt-ray/i-of-n``, then ``prepare.merge`` joins them into
  exactly the files the local engine writes. A slice already finished is kept, a slice cut
  short goes on from its checkpoint: run the same command again after an interruption.
  ``OUT`` may be a URL (``s3://bucket/prefix/``): each task then builds its slice on its
  own node's disk and uploads it when it is finished, ``meta.json`` last (``outputs``); the
  merge, on the driver, downloads the slices and uploads the files.
- ``read_openwebtext`` returns a ``ray.data.Dataset`` of documents. It is built with
  ``ray.data.from_items`` (one item per group of units) and ``map_batches``, both public,
  stable API, rather than a ``Datasource``/``ReadTask``, which Ray marks DeveloperAPI.

Without an address, a private local Ray instance is started (no dashboard, its files in a
temporary folder removed at the end, nothing under ``~``) and stopped when the work ends.
On a cluster, the corpus must be where every node can read it (object storage or a shared
file system), and ``OUT`` a URL or a folder on a file system every node shares.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from openwebtext.errors import CorpusError, OWTError, TooManyErrors
from openwebtext.index import Corpus
from openwebtext.options import ErrorPolicy
from openwebtext.prepare import (
    PrepareOptions,
    Progress,
    Report,
    finished,
    merge,
    prepare,
    unit_order,
)
from openwebtext.prepare.outputs import Location, join, location, read_json, remove
from openwebtext.records import Unit
from openwebtext.source import Storage
from openwebtext.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "EXTRA",
    "EngineError",
    "SkipLog",
    "library_errors",
    "local_ray",
    "read_openwebtext",
    "slice_folders",
    "tokenize",
]

#: How to install what this module needs.
EXTRA = "pip install 'openwebtext[ray]'"

#: The folder under ``OUT`` that holds the slices of a Ray run.
SLICES = ".owt-ray"

_log = logging.getLogger("openwebtext")


class EngineError(OWTError):
    """The Ray engine cannot run: Ray is not installed, or the cluster cannot be reached."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise EngineError(f"the Ray engine needs Ray: {EXTRA}") from exc
    return ray


def _temp_parent() -> str:
    # Ray puts unix sockets under its temporary folder; their paths must stay under ~107 bytes.
    parent = tempfile.gettempdir()
    return parent if len(parent) <= 20 else "/tmp"


@contextlib.contextmanager
def local_ray(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Use the Ray cluster at ``address``, or a private local instance, for the ``with`` block.

    If Ray is already initialised in this process, it is used as it is and left running.
    A local instance gets ``num_cpus`` CPUs, no dashboard (Ray 2.60 still runs its minimal
    head process, frontend off, on 127.0.0.1), no usage reports (unless
    ``RAY_USAGE_STATS_ENABLED`` is set), and a temporary folder of its own that is removed
    with it. Unless ``RAY_AUTH_MODE`` says otherwise, it uses token
    authentication with a random token held in the environment, so that Ray writes no token
    file under the home folder.

    Raises:
        EngineError: Ray is not installed, or it cannot start or connect.
    """
    ray = _ray()
    if ray.is_initialized():
        yield
        return
    if address:
        with _running(ray, f"cannot connect to the Ray cluster at {address}", address=address):
            yield
        return
    temp = tempfile.mkdtemp(prefix="owt-ray-", dir=_temp_parent())
    keys = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED")
    saved = {k: os.environ.get(k) for k in keys}
    private: dict[str, str | None] = {}
    if saved["RAY_AUTH_MODE"] is None:
        private.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    if saved["RAY_USAGE_STATS_ENABLED"] is None:
        private["RAY_USAGE_STATS_ENABLED"] = "0"  # a private instance reports nothing
    _auth_environment(private)
    try:
        with _running(ray, "cannot start a local Ray instance", num_cpus=num_cpus, _temp_dir=temp):
            yield
    finally:
        _auth_environment({k: saved[k] for k in private})
        shutil.rmtree(temp, ignore_errors=True)


@contextlib.contextmanager
def _running(ray: Any, failure: str, **init: Any) -> Iterator[None]:
    """``ray.init(**init)`` (quiet: no dashboard, no logs to the driver) for the block, then
    ``ray.shutdown``. A failure to start is an ``EngineError`` saying ``failure``."""
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    try:
        with _keep_sigterm():
            ray.init(**init, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise EngineError(f"{failure}: {exc}") from exc
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _keep_sigterm() -> Iterator[None]:
    """Undo ``ray.init``'s SIGTERM handler (``sys.exit(15)``): the caller's stays in force
    (``owt tokenize`` turns SIGTERM into the same clean stop as Ctrl-C, exit status 143)."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _auth_environment(values: dict[str, str | None]) -> None:
    """Set (None: unset) Ray's variables, and make this process see them.

    Ray reads them into a cached config when it is imported; it refreshes that cache the
    same way when it turns token authentication on by itself (``_enable_token_auth``).
    """
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    with contextlib.suppress(ImportError, AttributeError):
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined,unused-ignore]

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def _unwrap(exc: BaseException) -> BaseException:
    """The library's own error behind a Ray failure, else ``exc``.

    Ray wraps a task's exception in a ``RayTaskError`` (its ``cause``); Ray Data wraps it once
    more in a ``UserCodeException`` (its ``__cause__``).
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OWTError) and not _is_wrapper(current):
            return current
        todo += [getattr(current, "cause", None), current.__cause__]
    return exc


def _is_wrapper(exc: BaseException) -> bool:
    # RayTaskError(CorruptMember) is also a CorruptMember, but a copy holding Ray's traceback.
    return type(exc).__module__.startswith("ray.")


@contextlib.contextmanager
def library_errors() -> Iterator[None]:
    """Re-raise the library's error (naming file and member) behind a Ray or Ray Data failure.

    ``with library_errors(): rows = dataset.take_all()`` raises the ``CorruptMember`` the task
    raised, not Ray's copy of it (``RayTaskError(CorruptMember)``, a subclass of both).
    """
    try:
        yield
    except Exception as exc:
        error = _unwrap(exc)
        if error is exc:
            raise
        raise error from None


_configured: list[dict[str, Any] | None] = [None]


def _configure_storage(storage_options: dict[str, Any] | None) -> None:
    """In a Ray worker (not forked from the driver): the filesystems' options for URLs.

    Done once per worker process and set of options: ``storage.configure`` drops the
    filesystems already made.
    """
    if storage_options is None or _configured[0] == storage_options:
        return
    from openwebtext.source import configure

    configure(storage_options)
    _configured[0] = dict(storage_options)


# -- owt tokenize --engine ray ---------------------------------------------------------------


def _slice_task(
    corpus: Corpus,
    folder: str,
    options: PrepareOptions,
    index: int,
    count: int,
    every: float,
    storage_options: dict[str, Any] | None,
    restart: bool,
) -> tuple[int, list[str]]:
    """One Ray task: prepare slice ``index`` of ``count``; the tokens it wrote (0: the slice
    was already done) and its skip messages. ``restart``: also throw away the progress this
    node may have staged for the slice's URL (the slices themselves are already gone)."""
    _configure_storage(storage_options)
    report = prepare(
        corpus,
        folder,
        dataclasses.replace(options, workers=0),
        shard=(index, count),
        restart=restart,
        checkpoint_seconds=every,
    )
    return 0 if report.already else sum(report.meta["tokens"].values()), list(report.skipped)


def slice_folders(out: str | os.PathLike[str], count: int) -> list[Location]:
    """The folders (or URLs) of the ``count`` slices of a Ray run into ``out``."""
    root = join(location(out), SLICES)
    return [join(root, f"{i:05d}-of-{count:05d}") for i in range(count)]


def tokenize(
    corpus: Corpus,
    out: str | os.PathLike[str],
    options: PrepareOptions | None = None,
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    units_per_task: int = 16,
    restart: bool = False,
    progress: Callable[[Progress], None] | None = None,
    checkpoint_seconds: float = 2.0,
    storage_options: dict[str, Any] | None = None,
) -> Report:
    """Write what ``prepare.prepare(corpus, out, options)`` writes, with Ray tasks.

    Args:
        corpus: The corpus (its files must be readable by every Ray node).
        out: The output folder (on a file system every node shares), or a URL
            (``s3://bucket/prefix/``, any fsspec URL, made with ``storage_options``).
        options: What to write (``take`` is for the local engine only).
        address: A Ray cluster (None: start a local instance of ``num_cpus`` CPUs).
        num_cpus: CPUs of the local instance (None: Ray's default, every core).
        units_per_task: Units per task. The slice count follows from it, and a rerun must
            use the same value to keep the slices already done.
        restart: Throw away every slice and the merge's progress, and start over.
        progress: Called with a ``Progress`` as tasks finish and as the merge copies.
        checkpoint_seconds: Seconds between two checkpoints within a task.
        storage_options: The options ``corpus`` was opened with (URLs): the tasks use them,
            for the corpus and for an ``out`` URL. (This process uses the corpus's own,
            ``Corpus.storage``, or ``storage.configure``'s when it was opened without.)

    Raises:
        EngineError: Ray is missing or cannot start.
        PrepareError: ``out`` holds another run's progress (rerun with ``restart``).
        CorpusError: a bad member or document under ``on_error="raise"``.
        TooManyErrors: more skips in all than ``max_errors``.
    """
    options = options or PrepareOptions()
    if options.take is not None:
        raise ValueError("take is for the local engine: the Ray engine prepares whole slices")
    if not (isinstance(units_per_task, int) and units_per_task >= 1):
        raise ValueError(f"units_per_task must be >= 1, not {units_per_task!r}")
    order = unit_order(corpus, options)
    count = max(1, math.ceil(len(order) / units_per_task))
    folders = slice_folders(out, count)
    store = corpus.storage
    if restart:
        remove(join(location(out), SLICES), store)
    elif finished(corpus, out, options):
        return _already(out, store)
    units = corpus.units
    sizes = []
    for i in range(count):
        start, stop = i * len(order) // count, (i + 1) * len(order) // count
        sizes.append(sum(units[u].size for u in order[start:stop]))
    total = sum(sizes)
    skipped: list[str] = []
    with local_ray(address, num_cpus):
        ray = _ray()
        task = ray.remote(num_cpus=1, max_retries=0)(_slice_task)
        shared = ray.put(corpus)
        storage = ray.put(storage_options)
        pending = {
            task.remote(
                shared, str(folder), options, i, count, checkpoint_seconds, storage, restart
            ): i
            for i, folder in enumerate(folders)
        }
        done, tokens, began = 0, 0, time.monotonic()
        report = progress or (lambda event: None)
        report(Progress("tokenize", 0, total, 0))
        # On an error or Ctrl-C the other tasks are not cancelled one by one: ``ray.shutdown``
        # (leaving ``local_ray``) ends them with their owner, this driver, and each keeps its
        # last checkpoint. (Cancelling while the workers take the same Ctrl-C hit a failed
        # internal check in Ray 2.60 that aborted the driver before it could clean up.)
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                i = pending.pop(ref)
                try:
                    slice_tokens, messages = ray.get(ref)
                except Exception as exc:
                    raise _unwrap(exc) from None
                tokens += slice_tokens
                skipped += messages
                done += sizes[i]
                report(Progress("tokenize", done, total, tokens))
        _log.debug("ray: %d slices in %.1f s", count, time.monotonic() - began)
    _check_skips(folders, options, store)
    merged = merge(folders, out, restart=restart, progress=progress, storage=store)
    remove(join(location(out), SLICES), store)
    return dataclasses.replace(merged, skipped=tuple(skipped))


def _already(out: str | os.PathLike[str], store: Storage | None) -> Report:
    return Report(location(out), read_json(location(out), "meta.json", store) or {}, already=True)


def _check_skips(
    folders: Sequence[Location], options: PrepareOptions, store: Storage | None
) -> None:
    """``max_errors`` bounds the whole run's skips, not each slice's."""
    if options.max_errors is None:
        return
    skips = 0
    for folder in folders:
        meta = read_json(folder, "meta.json", store) or {}
        skips += meta["skipped_members"] + meta["skipped_documents"]
    if skips > options.max_errors:
        raise TooManyErrors(f"{skips} skipped, more than max_errors={options.max_errors}")


# -- read_openwebtext ------------------------------------------------------------------------


class _SkipActor:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, messages: list[str]) -> int:
        self.messages += messages
        return len(self.messages)

    def get(self) -> list[str]:
        return self.messages


class SkipLog:
    """What ``read_openwebtext(..., on_error="skip", skips=log)`` left out, across tasks.

    A small Ray actor (no CPU reserved): create it after Ray is initialised, read it after
    the dataset was consumed.
    """

    def __init__(self) -> None:
        ray = _ray()
        self._ray = ray
        self._actor = ray.remote(num_cpus=0)(_SkipActor).remote()

    def add(self, messages: list[str]) -> None:
        if messages:
            self._ray.get(self._actor.add.remote(messages))

    def messages(self) -> list[str]:
        """Every skipped member or document, as the library's error message."""
        result: list[str] = self._ray.get(self._actor.get.remote())
        return result

    def count(self) -> int:
        return len(self.messages())

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_log, (self._actor,))


def _rebuild_log(actor: Any) -> SkipLog:
    log = SkipLog.__new__(SkipLog)
    log._ray = _ray()
    log._actor = actor
    return log


@dataclasses.dataclass(frozen=True)
class _ReadGroup:
    """The map_batches function: reads the groups of units named by its input rows."""

    groups: tuple[tuple[Unit, ...], ...]
    storage_options: dict[str, Any] | None
    tokenizer: Tokenizer | None
    """Resolved once by ``read_openwebtext``; pickled as its spec (loaded once per Ray worker)."""
    on_error: ErrorPolicy
    skips: SkipLog | None
    max_member_bytes: int
    max_document_bytes: int

    def __call__(self, batch: dict[str, Any]) -> Any:
        import pyarrow as pa

        from openwebtext.engine import Reader

        _configure_storage(self.storage_options)
        tokenizer = self.tokenizer
        reader = Reader(self.max_member_bytes, self.max_document_bytes)
        columns: dict[str, list[Any]] = {"subset": [], "member": [], "name": [], "value": []}
        skipped: list[str] = []
        try:
            for group in batch["group"]:
                for unit in self.groups[int(group)]:
                    self._read(reader, unit, tokenizer, columns, skipped)
        finally:
            reader.close()
        if self.skips is not None:
            self.skips.add(skipped)
        if tokenizer is None:
            value = pa.array(columns.pop("value"), pa.string())
            key = "text"
        else:
            value = pa.array(columns.pop("value"), pa.list_(pa.int64()))
            key = "ids"
        arrays = {k: pa.array(v, pa.string()) for k, v in columns.items()}
        return pa.table({**arrays, key: value})

    def _read(
        self,
        reader: Any,
        unit: Unit,
        tokenizer: Any,
        columns: dict[str, list[Any]],
        skipped: list[str],
    ) -> None:
        from openwebtext.engine import encode_member

        try:
            member = reader.read(unit)
        except CorpusError as exc:
            self._error(exc, skipped)
            return
        for dropped in member.dropped:
            self._error(dropped, skipped)
        if tokenizer is not None:
            encoded = encode_member(member, tokenizer)
            ids = memoryview(encoded.data).cast(tokenizer.dtype.char)
            itemsize = tokenizer.dtype.itemsize
        errors = "replace" if member.replace else "strict"
        for k, offset in enumerate(member.offsets):
            if offset < 0:
                continue
            if tokenizer is None:
                value: Any = member.data[offset : offset + member.sizes[k]].decode("utf-8", errors)
            else:
                first = encoded.offsets[k] // itemsize
                value = ids[first : first + encoded.counts[k]].tolist()
            columns["subset"].append(unit.subset)
            columns["member"].append(unit.member)
            columns["name"].append(member.names[k])
            columns["value"].append(value)

    def _error(self, error: CorpusError, skipped: list[str]) -> None:
        if self.on_error == "raise":
            raise error
        if self.on_error == "warn":
            _log.warning("skipped: %s", error)
        skipped.append(str(error))


def read_openwebtext(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    storage_options: dict[str, Any] | None = None,
    tokenizer: str | None = None,
    on_error: ErrorPolicy = "raise",
    skips: SkipLog | None = None,
    units_per_task: int = 1,
    max_member_bytes: int = 1 << 30,
    max_document_bytes: int = 64 << 20,
) -> Any:
    """A ``ray.data.Dataset`` of the documents of an OpenWebText-style corpus.

    Rows: ``subset``, ``member``, ``name`` and ``text`` (or ``ids``, the token ids followed by
    the end-of-text id, with ``tokenizer=``), in archive order within a member. One read task
    per ``units_per_task`` units of the same index as the local loader. Ray must be
    initialised (``ray.init`` or ``local_ray``) before the dataset is consumed.

    Args:
        paths: Files, folders or glob patterns readable by every node, or URLs.
        storage_options: For URLs (``s3://``…, the ``remote`` extra): the options of their
            filesystems (``Corpus.open``), here and in every task.
        tokenizer: A tokenizer spec (``openwebtext.tokenizer``): rows carry ``ids``.
        on_error: ``raise`` the library's error (naming file and member) in the task: the
            consumer gets Ray's ``RayTaskError(CorruptMember)``, also a ``CorruptMember``
            (``library_errors()`` gives back the error itself); ``skip`` or ``warn``
            (logged in the task) leave the member or document out.
        skips: Where skipped members and documents are counted (``SkipLog``).
        units_per_task: Units read by one task.
        max_member_bytes: A member decompressing past this is an error.
        max_document_bytes: A document larger than this is an error.

    Raises:
        EngineError: Ray is not installed.
        CorpusError: a path holds no corpus (raised here, at once).
    """
    if on_error not in ("raise", "skip", "warn"):
        raise ValueError(f"on_error must be 'raise', 'skip' or 'warn', not {on_error!r}")
    if not (isinstance(units_per_task, int) and units_per_task >= 1):
        raise ValueError(f"units_per_task must be >= 1, not {units_per_task!r}")
    ray = _ray()
    # Resolved once: a bad spec fails here, not in every task.
    resolved = None if tokenizer is None else load_tokenizer(tokenizer)
    units = Corpus.open(paths, storage_options=storage_options).units
    groups = tuple(units[k : k + units_per_task] for k in range(0, len(units), units_per_task))
    read = _ReadGroup(
        groups, storage_options, resolved, on_error, skips, max_member_bytes, max_document_bytes
    )
    items = [{"group": g} for g in range(len(groups))]
    dataset = ray.data.from_items(items, override_num_blocks=len(groups))
    # This dataset's own copy of the context (derived datasets inherit it): raise the task's
    # error itself, a CorruptMember naming file and member, not a UserCodeException around it
    # (the wrapper would lose it: a pickled exception loses its __cause__).
    dataset.context.raise_original_map_exception = True
    return dataset.map_batches(read, batch_size=1, batch_format="numpy", zero_copy_batch=True)
