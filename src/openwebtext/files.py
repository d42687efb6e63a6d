"""Writing outputs without destroying what is at their path.

An output (a state, ``train.bin``, ``meta.json``) is written only onto a regular file
or a new path. A symlink is followed to its target and the link kept; a device, FIFO,
socket or folder is refused with :class:`~openwebtext.errors.OutputError`, never
replaced. :func:`output_path` checks this, and that the folder exists and is writable,
so a command can refuse a bad path at start-up rather than after the whole run.
:func:`atomic_file` writes under a temporary name beside the target and renames it into
place only once complete, with the permissions an ordinary new file gets (the umask):
a reader never sees half a file, and an interrupted write leaves nothing behind.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from openwebtext.codec import open_regular
from openwebtext.errors import OutputError

__all__ = [
    "atomic_file",
    "atomic_write",
    "cache_root",
    "folder_locked",
    "named",
    "open_to_read",
    "output_path",
    "print_out",
    "sync_folder",
    "umask",
    "written_for",
]


#: The name of a temporary file of :func:`atomic_file` (and of :func:`output_path`'s probe):
#: ``.NAME.XXXXXXXX.tmp``, ``tempfile``'s random characters between the target's name and
#: ``.tmp``.
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]+\.tmp")


def written_for(name: str) -> str | None:
    """The name of the file whose :func:`atomic_file` (or :func:`output_path` probe) a file
    named ``name`` is the temporary file of, or None: what a write killed before its rename
    (SIGKILL, a power cut) leaves, and a sweep of the folder removes where it knows the
    target's name as its own (``prepare.workdir``)."""
    found = _TEMPORARY.fullmatch(name)
    return None if found is None else found["name"]


def cache_root() -> Path:
    """Where openwebtext caches things: ``$OWT_CACHE_DIR`` or ``~/.cache/openwebtext``.

    Raises:
        OSError: neither is known (no ``$OWT_CACHE_DIR``, no ``$HOME``, and a user the system
            does not know: a container's): what a cache that cannot be written is, only a
            slower read (a caller keeps nothing, and looks for nothing there).
    """
    given = os.environ.get("OWT_CACHE_DIR")
    if given:
        return Path(given)
    try:
        return Path.home() / ".cache" / "openwebtext"
    except (RuntimeError, KeyError) as exc:  # (pathlib: "Could not determine home directory")
        raise OSError(errno.ENOENT, "no home folder to cache in: set OWT_CACHE_DIR") from exc


def open_to_read(path: str) -> int:
    """A descriptor of the corpus file ``path``, to ``pread``: a regular file's (a folder's
    too: its read says so), never a FIFO's, whose open would wait for a writer forever.

    Raises:
        OSError: it cannot be opened, or is a FIFO, a socket or a device (put in the file's
            place since the corpus was opened).
    """
    return open_regular(path, folder=True)


def named(what: str) -> Callable[[str], str]:
    """An argparse type of a path or URL: the text as given, never empty nor blank (an unset
    shell variable in ``--resume "$STATE"`` was taken as no state: the run began again from
    the start; ``--state-out ''`` wrote none; an output folder ``''`` was the current one)."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"must name a {what}, not {text!r}")
        return text

    parse.__name__ = what
    return parse


def output_path(path: str | os.PathLike[str]) -> Path:
    """The file to write for ``path``, checked: a symlink resolved to its target.

    Args:
        path: Where the output goes.

    Returns:
        The real path to replace (``path`` itself unless it is a symlink).

    Raises:
        OutputError: ``path`` is (or links to) something other than a regular file,
            or its folder is missing or not writable (a file made there and removed: a
            filesystem may refuse what its modes allow, as /sys does root).
    """
    target = _target(path)
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise _unwritable(path, target, exc) from exc
    return target


def _unwritable(path: str | os.PathLike[str], target: Path, exc: OSError) -> OutputError:
    return OutputError(f"{os.fspath(path)}: cannot write a file in the folder {target.parent}: "
                       f"{exc.strerror or exc}")  # fmt: skip


_NOT_REGULAR = "is not a regular file (a device, FIFO or socket); refusing to replace it"


def _target(path: str | os.PathLike[str]) -> Path:
    """``output_path`` without making a file: its checks of the path and the folder's modes."""
    given = os.fspath(path)
    try:  # (as the kernel opens it: /dev/stdout onto a pipe resolves to no path, "pipe:[N]")
        mode: int | None = os.stat(given).st_mode
    except OSError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise OutputError(f"{given}: {_NOT_REGULAR}")
    try:
        target = Path(given).resolve()  # follows every link; a dangling one gives its target
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise OutputError(f"{given}: cannot follow this path: {exc}") from exc
    shown = given if str(target) == os.path.abspath(given) else f"{given} (-> {target})"
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"{shown}: {exc.strerror or exc}") from exc
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{shown}: is a folder; give a file name")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(f"{shown}: {_NOT_REGULAR}")
    folder = target.parent
    if not folder.is_dir():
        raise OutputError(f"{shown}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{shown}: the folder {folder} is not writable")
    return target


def _new_file_mode(target: Path) -> int:
    """The mode the output gets: the file's own if it exists, else 0666 less the umask."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(os.stat(target).st_mode)
    return 0o666 & ~umask()


def umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status``): setting it to
    read it back gives a file another thread creates meanwhile the mode set. Where there is
    no such file, set to 022 and back (a moment of the common default, not of 0)."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", encoding="utf-8") as f,
    ):
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, durable: bool = True) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` only if the block completes.

    Written as a hidden temporary file beside the target (``.NAME.XXXX.tmp``, so the rename
    is atomic), given the ordinary permissions, then renamed over the target. On any
    exception, or an interrupt, the temporary file is removed and the target left as it was
    (a SIGKILL or a power cut leaves it: :func:`written_for` names its target, for the
    sweep of a folder whose files a command knows as its own).
    This is the one temp-then-rename writer of the package.

    Args:
        path: The file to replace.
        durable: Also survive a power cut: the file is fsync'd before the rename and its
            folder after it. Needed wherever a later step trusts the file once it exists:
            saved states and checkpoints, ``owt tokenize``'s progress record (it vouches for
            the bytes of the ``.part`` files it names) and ``meta.json`` (the finished
            marker). Not needed for what can be fetched or computed again and is checked when
            read, such as the member cache (``durable=False``: a lost entry is a cache miss).

    Raises:
        OutputError: see :func:`output_path`.
        OSError: writing failed (a full disk): the target is unchanged.
    """
    target = _target(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise _unwritable(path, target, exc) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        sync_folder(target.parent)


def sync_folder(folder: str | os.PathLike[str]) -> None:
    """fsync a folder, so that the names renamed into it survive a power cut."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_locked(folder: str | os.PathLike[str], most: float = 10.0) -> Iterator[bool]:
    """Hold an exclusive ``flock`` of ``folder`` (for a read, join and replace of a small file
    in it by several processes at once, the counts file's), waiting at most ``most`` seconds:
    yields whether it is held (not: a file system that cannot lock, or a holder stopped for
    longer; the work goes on, as it did with no lock, rather than wait for ever)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield False
        return
    try:
        end, held = time.monotonic() + most, False
        while not held:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                if time.monotonic() > end:
                    break
                time.sleep(0.005)
            except OSError:  # (ENOLCK, EBADF: a file system that cannot lock)
                break
        yield held
    finally:
        os.close(fd)  # (the lock goes with it)


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (str: UTF-8) atomically; see :func:`atomic_file`."""
    with atomic_file(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def print_out(text: str) -> None:
    """Print ``text`` (a line) on standard output, flushed: what a command prints there (a
    path, a table). A full disk or an I/O error is an ``OutputError`` naming standard output,
    not a bare errno; a reader gone away stays ``BrokenPipeError`` (``owt`` ends quietly).
    Characters stdout's encoding cannot write (``PYTHONIOENCODING=ascii``, a path with an
    ``é``) are written as the bytes the file system names them by (``os.fsencode``)."""
    try:
        try:
            print(text, flush=True)
        except UnicodeEncodeError:
            sys.stdout.flush()
            sys.stdout.buffer.write(os.fsencode(text) + b"\n")
            sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise OutputError(f"cannot write standard output: {exc.strerror or exc}") from exc
