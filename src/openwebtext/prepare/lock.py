"""One run at a time in an output folder: ``hold`` takes the folder's lock (``.owt-lock``)
for the ``with`` block, or says at once which run holds it (its pid and host), or waits for
it (``wait``).

The lock is an ``flock`` on the file, which the system lets go of when its process ends,
however it ends: the lock of a run killed with SIGKILL is taken over by the next run, with
nothing to clean. The file names its holder (pid, host, start time) for the message of the
run that finds it held, and is removed when the holder is done. A URL output is locked
through its local staging folder, which every run of that URL on this machine shares.

A lock is of a file, not of a name: the holder before us removes the file as it lets go,
and a file removed while held (a temporary-file cleaner, ``rm .owt-*``, NFS) lets another
run create and lock a new one. So a lock counts only while the file locked is the one at
the path (same device and inode): a waiter that gets a removed file's lock tries again on
the new one, a holder removes the file only if it is still its own, and a run calls
``confirm`` before it commits, refusing to when another run may be writing the folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from openwebtext import codec
from openwebtext.prepare.workdir import LOCK, PrepareError

__all__ = ["LOCK", "confirm", "hold", "hold_if_free", "hold_to_read"]

_log = logging.getLogger("openwebtext")
#: The folders each thread holds (``folders``: resolved folder -> the locked file's
#: ``_identity``, None where the file system cannot lock): holding one again is a no-op.
#: Another thread of the same process is another run, and is refused as any other.
_held = threading.local()


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _is_ours(path: Path, fd: int) -> bool:
    """Whether the file at ``path`` is still the one ``fd`` locks."""
    try:
        return _identity(os.stat(path)) == _identity(os.fstat(fd))
    except FileNotFoundError:
        return False


def _folders() -> dict[str, tuple[int, int] | None]:
    folders: dict[str, tuple[int, int] | None] = _held.__dict__.setdefault("folders", {})
    return folders


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says ("pid 12, host h"), or that it does not say."""
    try:
        body = codec.parse(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(body['pid'])} on {body['host']!s}, since {body['since']!s}"
    except (OSError, ValueError, KeyError, TypeError):
        return "it has not said which yet"


def _open_locked(path: Path, wait: bool, shared: bool = False) -> int:
    """An fd of ``path`` holding its lock (``wait``: once the holder lets it go; ``shared``: a
    reader's, which other readers share and a run writing the folder does not).

    Raises:
        PrepareError: another process holds it (not ``wait``).
    """
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, kind | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise
                _log.warning("%s is in use by another run (%s): waiting", path.parent, _holder(fd))
                fcntl.flock(fd, kind)
            # The holder before us may have removed the file between our open and our lock
            # (and a third run locked a new one): the lock we hold is then of a file nobody
            # else will see; take the new one's.
            same = _is_ours(path, fd)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise PrepareError(
                f"{path.parent} is in use by another run ({holder}): let it finish, or add "
                "--wait to wait for it"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)


@contextlib.contextmanager
def hold(folder: Path, wait: bool = False) -> Iterator[None]:
    """Hold the lock of the output folder ``folder`` (created if needed) for the block
    (re-entered by the thread holding it: a no-op).

    Raises:
        PrepareError: another live run holds it (not ``wait``), or the folder cannot be
            made.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if folder.exists() and not folder.is_dir():
            raise PrepareError(f"{folder} is not a folder") from None
        raise PrepareError(f"cannot create the output folder {folder}: {exc}") from exc
    path = folder / LOCK
    key = str(folder.resolve())
    held = _folders()
    if key in held:  # this thread holds it already (a Ray run's merge, in its own run)
        yield
        return
    try:
        fd = _open_locked(path, wait)
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise PrepareError(f"cannot lock {path}: {exc}") from exc
        _log.warning("%s: this file system cannot lock files; not locked", folder)
        held[key] = None
        try:
            yield
        finally:
            del held[key]
        return
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since})
        os.ftruncate(fd, 0)
        os.pwrite(fd, body.encode(), 0)
        held[key] = _identity(os.fstat(fd))
        yield
    finally:
        held.pop(key, None)
        if _is_ours(path, fd):  # another run's lock file (ours was removed) stays
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # while still holding it: a waiter then retries on a new file
        os.close(fd)


@contextlib.contextmanager
def hold_if_free(folder: Path) -> Iterator[bool]:
    """Hold the lock of ``folder`` for the block if it can be taken at once (True), else
    hold nothing (False): for tidying a folder whose work is done, which a read-only folder
    (no lock file can be made) or another run holding it leaves as it is."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(hold(folder))
            free = True
        except PrepareError:
            free = False
        yield free


@contextlib.contextmanager
def hold_to_read(folder: Path, wait: bool = False) -> Iterator[None]:
    """Hold a reader's lock of a folder a run may write (a slice a merge reads), shared with
    other readers (two merges of the same slices): a run writing the folder is refused at
    once (or, ``wait``, waited for) and none starts meanwhile. The last reader out removes the
    lock file. A folder whose lock file cannot be made or locked (read-only: no run of ours
    writes it either), that this thread holds already, or that is no folder is read as it is.

    Raises:
        PrepareError: another live run holds it (not ``wait``).
    """
    path = folder / LOCK
    if not folder.is_dir() or str(folder.resolve()) in _folders():
        yield
        return
    try:
        fd = _open_locked(path, wait, shared=True)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        try:  # alone (no other reader holds it): the file goes, as a run's does
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _is_ours(path, fd):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        except OSError:  # (another reader: the last one removes it)
            pass
        os.close(fd)


def confirm(folder: Path) -> None:
    """Check, before committing, that this thread's lock of ``folder`` still counts: the
    file at ``folder/.owt-lock`` is the one it locked (a no-op where it holds no lock).

    Raises:
        PrepareError: the lock file was removed or replaced: another run may be writing
            the folder, and this one must not commit.
    """
    locked = _folders().get(str(folder.resolve()))
    if locked is None:
        return
    path = folder / LOCK
    try:
        now: tuple[int, int] | None = _identity(os.stat(path))
    except FileNotFoundError:
        now = None
    if now != locked:
        what = "was removed" if now is None else "was replaced by another run's"
        raise PrepareError(
            f"{path} {what} while this run held it (a temporary-file cleaner?): another run "
            f"may be writing {folder}, so this one stops before committing; run again "
            "(with --wait) once the folder is free"
        )
