"""One run at a time in an output folder: ``hold`` takes the folder's lock (``.owt-lock``)
for the ``with`` block, or says at once which run holds it (its pid and host), or waits for
it (``wait``).

The lock is an ``flock`` on the file, which the system lets go of when its process ends,
however it ends: the lock of a run killed with SIGKILL is taken over by the next run, with
nothing to clean. The file names its holder (pid, host, start time) for the message of the
run that finds it held, and is removed when the holder is done. A URL output is locked
through its local staging folder, which every run of that URL on this machine shares.
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

from openwebtext.prepare.workdir import PrepareError

__all__ = ["LOCK", "hold"]

#: The lock file's name in an output folder.
LOCK = ".owt-lock"

_log = logging.getLogger("openwebtext")
#: The folders each thread holds (``folders``): holding one again is a no-op. Another
#: thread of the same process is another run, and is refused as any other.
_held = threading.local()


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says ("pid 12, host h"), or that it does not say."""
    try:
        body = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(body['pid'])} on {body['host']!s}, since {body['since']!s}"
    except (OSError, ValueError, KeyError, TypeError):
        return "it has not said which yet"


def _open_locked(path: Path, wait: bool) -> int:
    """An fd of ``path`` holding its lock (``wait``: once the holder lets it go).

    Raises:
        PrepareError: another process holds it (not ``wait``).
    """
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise
                _log.warning("%s is in use by another run (%s): waiting", path.parent, _holder(fd))
                fcntl.flock(fd, fcntl.LOCK_EX)
            # The holder before us may have removed the file between our open and our lock:
            # then the lock we hold is of a file nobody else will see; take the new one's.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
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
    held = _held.__dict__.setdefault("folders", set())
    if key in held:  # this thread holds it already (a Ray run's merge, in its own run)
        yield
        return
    try:
        fd = _open_locked(path, wait)
    except OSError as exc:
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
            raise PrepareError(f"cannot lock {path}: {exc}") from exc
        _log.warning("%s: this file system cannot lock files; not locked", folder)
        yield
        return
    try:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since})
        os.ftruncate(fd, 0)
        os.pwrite(fd, body.encode(), 0)
        held.add(key)
        yield
    finally:
        held.discard(key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # while still holding it: a waiter then retries on a new file
        os.close(fd)
