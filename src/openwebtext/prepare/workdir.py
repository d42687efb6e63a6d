"""The output folder of a prepare run: files under fixed temporary names, a progress record,
and the commit step that makes the finished files appear, complete or not at all.

While a run works, everything it writes in ``OUT`` has a fixed hidden name:
``.NAME.part`` for each file, ``.owt-progress.json`` for the record of how far it got. The
record is replaced atomically (``files.atomic_file``: a temporary file, fsync'd, renamed) and
only after the files it describes were fsync'd, so after a crash or a kill the files are at
least as long as the record says: a rerun truncates them to the recorded sizes and goes on.
Names never change between runs, so nothing accumulates.

The commit step (``commit``): the record first says ``commit`` with the finished ``meta``;
then the old ``meta.json`` goes, then every file of an earlier run this one does not write
(its format pass's ``train.idx``, llm.c shards, ``.ds`` files and markers), then every
``.NAME.part`` is renamed to ``NAME``, and ``meta.json`` comes last. A ``meta.json``
therefore always describes the files beside it (it also holds their sha256), and no moment
of a commit leaves a new ``train.bin`` beside an old run's ``train.idx``. A commit cut short
is finished by the next run.

What a run leaves when it is killed (its parts, its record, a temporary file of
``files.atomic_file``, a format pass's record) is swept (``Workdir.sweep``) under the
folder's lock at the start and end of every run, and by a run that finds its work done
(when it can take the lock: not on a read-only folder): parts that no progress record goes
on from, the record and parts of a commit that wrote its ``meta.json``, every temporary
file of a name a run or format pass writes. A folder therefore converges to exactly the
finished files, wherever a run was interrupted.
Files are created with mode 0666 less the umask, like any file a program writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openwebtext import codec
from openwebtext.errors import OWTError, StateError
from openwebtext.files import atomic_file, sync_folder, written_for
from openwebtext.prepare.state import FileInfo, Meta, ProgressRecord

__all__ = [
    "LOCK",
    "OUTPUTS",
    "PROGRESS",
    "SEAL",
    "Part",
    "PrepareError",
    "Workdir",
    "owned",
    "seal_of",
    "sha256_file",
    "untidy",
]

#: The progress record's name in the output folder.
PROGRESS = ".owt-progress.json"
#: The lock file's name in an output folder (``lock``: one run at a time).
LOCK = ".owt-lock"
#: Every finished file a run of any kind leaves (a whole run, a slice of either split).
OUTPUTS = ("train.bin", "val.bin", "tokens.bin", "lengths.bin")
#: Every token file a run, or a format pass over it, may leave (``prepare.convert``):
#: Megatron's ``.idx``, datatrove's ``.ds`` and ``.ds.index``, llm.c's shards, and each
#: format's marker and progress record. A trainer (and ``open_tokens``) reads them beside
#: ``train.bin``, so those of an earlier run must go when a new run commits.
_DERIVED = re.compile(
    r"(train|val)(\.idx|\.ds|\.ds\.index|_\d{6}\.bin)"
    r"|\.?(megatron|llmc|datatrove)(\.json|\.progress\.json)"
)


def owned(name: str) -> bool:
    """Whether a file named ``name`` in an output folder is a run's (``OUTPUTS``) or a
    format pass's (``_DERIVED``): what a new run of the folder removes if it does not
    write it, locally (``Workdir.commit``) and behind a URL (``outputs.publish``)."""
    return name in OUTPUTS or _DERIVED.fullmatch(name) is not None


#: A format pass's record (``.FORMAT.progress.json``): stale once its marker is written.
_FORMAT_PASS = re.compile(r"\.(megatron|llmc|datatrove)\.progress\.json")
#: A datatrove ``.ds`` being linked to its ``.bin`` (``convert``), before its rename.
_LINKING = re.compile(r"\.(train|val)\.ds\.link")
_PARTS = frozenset(f".{name}.part" for name in OUTPUTS)
_HASHED = 1 << 20  # bytes of a file hashed at a time


def _written_here(name: str) -> bool:
    """Whether ``name`` is a temporary file that nothing goes on from: an ``atomic_file``
    write of a file a run or format pass writes (``.train.idx.XXXXXXXX.tmp``), cut short
    before its rename; or a ``.ds`` link cut short likewise. (``.meta.json.*`` and
    ``.owt-progress.json.*``: earlier versions' names of the same.)"""
    target = written_for(name)
    if target is not None and (owned(target) or target in ("meta.json", PROGRESS)):
        return True
    return (
        _LINKING.fullmatch(name) is not None
        or name.startswith((".meta.json.", f"{PROGRESS}."))
    )


def untidy(folder: Path) -> bool:
    """Whether ``folder`` holds anything an interrupted run or format pass may have left: a
    part, a progress record, a format pass's record, a temporary file, the lock file. A run
    that finds its work done takes the lock to sweep them (``Workdir.sweep``) only then, so
    that a finished folder that holds none of them is read only."""
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    return any(
        name in _PARTS
        or name in (PROGRESS, LOCK)
        or _FORMAT_PASS.fullmatch(name) is not None
        or _written_here(name)
        for name in names
    )


class PrepareError(OWTError):
    """``owt tokenize`` / ``owt merge`` cannot go on: another run's progress, a bad slice, ..."""


#: The key of a progress record's seal (``Workdir.save``), beside its fields.
SEAL = "seal"


def seal_of(body: dict[str, Any]) -> str:
    """A progress record's seal: a hash of its fields as written. A record whose fields were
    changed since (by hand, by another program) is refused (``Workdir.load``): one that says
    a position, a phase or counts its parts do not hold, each within its bounds, would
    resume a run that skips or repeats units, or commits part of one."""
    text = json.dumps(body, indent=1, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _is_of(path: Path, info: FileInfo | None) -> bool:
    """Whether ``path`` is the file ``info`` says (its size, then its sha256)."""
    try:
        return info is not None and path.stat().st_size == info.bytes and (
            sha256_file(path) == info.sha256)  # fmt: skip
    except FileNotFoundError:
        return False


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, in hex (a regular file's: a FIFO's read would wait)."""
    digest = hashlib.sha256()
    with os.fdopen(codec.open_regular(path), "rb") as f:
        for chunk in iter(lambda: f.read(_HASHED), b""):  # (hashlib.file_digest: 3.11+)
            digest.update(chunk)
    return digest.hexdigest()


class Part:
    """A file being written as ``.NAME.part``, opened at ``size`` bytes (0: a new file).

    Raises:
        PrepareError: the file on disk is shorter than ``size`` (the record does not fit it).
    """

    def __init__(self, folder: Path, name: str, size: int = 0) -> None:
        self.name = name
        self.path = folder / f".{name}.part"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            actual = os.fstat(fd).st_size
            if actual < size:
                raise PrepareError(
                    f"{self.path} holds {actual} bytes, fewer than the {size} that "
                    f"{PROGRESS} records: run again with --restart to start over"
                )
            os.ftruncate(fd, size)
            self.file = open(fd, "wb", buffering=1 << 20, closefd=True)  # noqa: SIM115
        except BaseException:
            os.close(fd)
            raise
        self.file.seek(size)
        self.size = size

    def write(self, data: bytes | memoryview) -> None:
        self.size += self.file.write(data)

    def sync(self) -> int:
        """Flush and fsync; return the size."""
        self.file.flush()
        os.fsync(self.file.fileno())
        return self.size

    def close(self) -> None:
        self.file.close()


class Workdir:
    """The output folder: its progress record, its parts, and the commit step.

    ``guard`` is called before the commit step changes anything and again before it writes
    ``meta.json``; it raises to stop a run that no longer owns the folder (``lock.confirm``).
    """

    def __init__(
        self, folder: str | os.PathLike[str], guard: Callable[[], None] | None = None
    ) -> None:
        self.folder = Path(folder)
        self.guard = guard or (lambda: None)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PrepareError(f"cannot create the output folder {self.folder}: {exc}") from exc
        if not self.folder.is_dir():
            raise PrepareError(f"{self.folder} is not a folder")

    @property
    def progress_path(self) -> Path:
        return self.folder / PROGRESS

    def load(self) -> ProgressRecord | None:
        """The progress record, or None if there is none.

        Raises:
            PrepareError: the record cannot be read as one (naming the file and the field).
        """
        path = self.progress_path
        try:
            body = codec.parse(codec.read_file(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PrepareError(
                f"{path} is not a progress record ({exc}): run again with --restart"
            ) from exc
        seal = body.pop(SEAL, None) if isinstance(body, dict) else None
        try:
            record = ProgressRecord.from_json(body)
            record.check_parts()
        except StateError as exc:
            raise PrepareError(
                f"{path} is not a progress record ({exc}): run again with --restart"
            ) from None
        if seal != seal_of(body):  # (after the fields: a damaged one is named)
            why = "not of what it holds"
            if seal is None:
                why = "missing: edited, or written before records were sealed"
            raise PrepareError(
                f"{path} was changed since this run wrote it (its {SEAL} is {why}): its "
                "position, phase or counts may not be those of its parts; run again with "
                "--restart"
            )
        return record

    def save(self, record: ProgressRecord) -> None:
        """Replace the progress record atomically (call after syncing the parts it describes)."""
        body = codec.encode(record)
        self.write_json(PROGRESS, body | {SEAL: seal_of(body)})

    def write_json(self, name: str, body: dict[str, Any]) -> None:
        """Write ``name`` atomically and durably (``files.atomic_file``): a temporary file,
        fsync, rename, fsync the folder."""
        with atomic_file(self.folder / name, durable=True) as f:
            f.write((json.dumps(body, indent=1, sort_keys=True) + "\n").encode())

    def part(self, name: str, size: int = 0) -> Part:
        return Part(self.folder, name, size)

    def part_path(self, name: str) -> Path:
        return self.folder / f".{name}.part"

    def clear(self) -> None:
        """Forget a run: its progress record and the parts of every kind of run (those of
        an interrupted run of another split rule too: nothing would go on from them)."""
        self.progress_path.unlink(missing_ok=True)
        self.sweep()  # (no record now: every part goes)

    def sweep(self) -> None:
        """Remove what interrupted runs left in the folder that nothing will go on from (call
        it holding the folder's lock: no run is writing here then).

        - The parts (``.NAME.part``, any split rule's), unless a progress record goes on
          from them (an undamaged one of any config: the run that finds it goes on from it,
          or refuses it; a damaged one is kept too, for the run to refuse it by name).
        - A record in phase ``commit`` whose ``meta.json`` is written: the commit was cut
          short after it; its parts, then the record, go.
        - A format pass's record (``.FORMAT.progress.json``) once its marker is written.
        - The temporary files of writes cut short (``files.atomic_file``'s ``.NAME.XXXX.tmp``
          of every name a run or format pass writes; a ``.ds`` link's).
        """
        try:
            record = self.load()
        except PrepareError:
            record, damaged = None, True
        else:
            damaged = False
        done = record is not None and self._committed(record)
        goes_on = damaged or (record is not None and not done)
        present = {path.name for path in self.folder.iterdir()}
        for name in present:
            stale = (name in _PARTS and not goes_on) or _written_here(name)
            if (found := _FORMAT_PASS.fullmatch(name)) is not None:
                stale = f"{found[1]}.json" in present
            if stale:
                (self.folder / name).unlink(missing_ok=True)
        if done:
            self.progress_path.unlink(missing_ok=True)
        sync_folder(self.folder)

    def _committed(self, record: ProgressRecord) -> bool:
        """Whether ``record``'s commit wrote its ``meta.json`` (only its cleanup was left)."""
        if record.phase != "commit" or record.meta is None:
            return False
        try:
            written = Meta.from_json(codec.parse(codec.read_file(self.folder / "meta.json")))
        except (OSError, ValueError, StateError):
            return False
        return written == record.meta

    def commit(self, record: ProgressRecord, names: tuple[str, ...]) -> None:
        """Make the parts ``names`` appear with ``record.meta``, then forget the run.

        ``record`` is saved (phase ``commit``) before anything is renamed, so a run cut short
        here is finished by the next one. The order makes every moment of it one of two
        folders: the earlier run's files whole (its ``meta.json`` not gone yet), or no
        ``meta.json`` and no file of the earlier run's format passes, with this run's files
        appearing; then this run's, its ``meta.json`` last. The parts that were only
        temporary (pass 1's, once permuted) go after it (``sweep``).
        """
        meta = record.meta
        if meta is None:
            raise ValueError("a record is committed with its meta")
        self.guard()
        record = codec.replace(record, phase="commit")
        self.save(record)
        with contextlib.suppress(FileNotFoundError):
            (self.folder / "meta.json").unlink()
        # Another run's files (a slice's tokens.bin, an earlier run's train.idx, llm.c
        # shards, .ds files, their markers first): a trainer would read them beside this
        # run's train.bin, so they go before it is renamed into place.
        stale = [p for p in self.folder.iterdir() if owned(p.name) and p.name not in names]
        for path in sorted(stale, key=lambda p: not p.name.endswith(".json")):
            path.unlink(missing_ok=True)
        sync_folder(self.folder)
        files: dict[str, FileInfo] = {str(k): v for k, v in meta.files.items()}
        for name in names:
            part = self.part_path(name)
            if part.exists():
                os.replace(part, self.folder / name)
            elif not _is_of(self.folder / name, files.get(name)):  # (renamed by a commit
                # cut short; not an earlier run's file of the name, or another's)
                there = (self.folder / name).exists()
                raise PrepareError(
                    f"{self.folder}: {part.name} is gone, and {name} is "
                    + ("not this run's (its size or sha256)" if there else "not there")
                    + ": run again with --restart"
                )
        sync_folder(self.folder)
        self.guard()  # no meta.json over files another run may have replaced meanwhile
        self.write_json("meta.json", codec.encode(meta))
        self.sweep()  # the parts only pass 1 needed, the record, writes a kill cut short
