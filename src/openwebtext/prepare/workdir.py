"""The output folder of a prepare run: files under fixed temporary names, a progress record,
and the commit step that makes the finished files appear, complete or not at all.

While a run works, everything it writes in ``OUT`` has a fixed hidden name:
``.NAME.part`` for each file, ``.owt-progress.json`` for the record of how far it got. The
record is replaced atomically (``files.atomic_file``: a temporary file, fsync'd, renamed) and
only after the files it describes were fsync'd, so after a crash or a kill the files are at
least as long as the record says: a rerun truncates them to the recorded sizes and goes on.
Names never change between runs, so nothing accumulates.

The commit step (``commit``): the record first says ``commit`` with the finished ``meta``;
then the old ``meta.json`` goes, every ``.NAME.part`` is renamed to ``NAME``, and
``meta.json`` comes last. A ``meta.json`` therefore always describes the files beside it (it
also holds their sha256). A commit cut short is finished by the next run.
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
from openwebtext.files import atomic_file, sync_folder
from openwebtext.prepare.state import ProgressRecord

__all__ = [
    "OUTPUTS",
    "PROGRESS",
    "Part",
    "PrepareError",
    "Workdir",
    "owned",
    "sha256_file",
]

#: The progress record's name in the output folder.
PROGRESS = ".owt-progress.json"
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


class PrepareError(OWTError):
    """``owt tokenize`` / ``owt merge`` cannot go on: another run's progress, a bad slice, ..."""


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, in hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
            body = codec.parse(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PrepareError(
                f"{path} is not a progress record ({exc}): run again with --restart"
            ) from exc
        try:
            record = ProgressRecord.from_json(body)
            record.check_parts()
            return record
        except StateError as exc:
            raise PrepareError(
                f"{path} is not a progress record ({exc}): run again with --restart"
            ) from None

    def save(self, record: ProgressRecord) -> None:
        """Replace the progress record atomically (call after syncing the parts it describes)."""
        self.write_json(PROGRESS, codec.encode(record))

    def write_json(self, name: str, body: dict[str, Any]) -> None:
        """Write ``name`` atomically and durably (``files.atomic_file``): a temporary file,
        fsync, rename, fsync the folder."""
        with atomic_file(self.folder / name, durable=True) as f:
            f.write((json.dumps(body, indent=1, sort_keys=True) + "\n").encode())

    def part(self, name: str, size: int = 0) -> Part:
        return Part(self.folder, name, size)

    def part_path(self, name: str) -> Path:
        return self.folder / f".{name}.part"

    def clear(self, names: tuple[str, ...]) -> None:
        """Forget a run: its progress record and the parts of ``names``."""
        for name in [*names, "meta.json"]:
            self.part_path(name).unlink(missing_ok=True)
        self._remove_interrupted_writes()
        self.progress_path.unlink(missing_ok=True)

    def _remove_interrupted_writes(self) -> None:
        """The temporary files of a record or ``meta.json`` whose write was killed
        (``files.atomic_file`` names them ``.NAME.XXXX.tmp``)."""
        for stale in [
            *self.folder.glob(f".{PROGRESS}.*.tmp"),
            *self.folder.glob(f".{PROGRESS.lstrip('.')}.*"),
            *self.folder.glob(".meta.json.*"),
        ]:
            stale.unlink(missing_ok=True)

    def commit(self, record: ProgressRecord, names: tuple[str, ...], drop: tuple[str, ...]) -> None:
        """Make the parts ``names`` appear with ``record.meta``, then forget the run.

        ``record`` is saved (phase ``commit``) before anything is renamed, so a run cut short
        here is finished by the next one. ``drop``: parts that are only temporary.
        """
        meta = record.meta
        if meta is None:
            raise ValueError("a record is committed with its meta")
        self.guard()
        record = codec.replace(record, phase="commit")
        self.save(record)
        with contextlib.suppress(FileNotFoundError):
            (self.folder / "meta.json").unlink()
        for name in names:
            part = self.part_path(name)
            if part.exists():
                os.replace(part, self.folder / name)
            elif not (self.folder / name).exists():
                raise PrepareError(
                    f"{self.folder}: neither {part.name} nor {name} exists: run again with "
                    "--restart"
                )
        # Another run's files (a slice's tokens.bin, an earlier run's train.idx or llm.c
        # shards): a trainer would read them beside this run's train.bin.
        for stale in self.folder.iterdir():
            if owned(stale.name) and stale.name not in names:
                stale.unlink(missing_ok=True)
        sync_folder(self.folder)
        self.guard()  # no meta.json over files another run may have replaced meanwhile
        self.write_json("meta.json", codec.encode(meta))
        for name in drop:
            self.part_path(name).unlink(missing_ok=True)
        self._remove_interrupted_writes()  # a record's write a kill cut short
        self.progress_path.unlink(missing_ok=True)
        sync_folder(self.folder)
