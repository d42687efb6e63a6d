"""The Ray side that is not about the work: Ray itself (``ray_module``, ``EngineError``), a
private local instance or a cluster for a ``with`` block (``local_ray``: its temporary folder,
token authentication, SIGTERM kept), the library's errors behind Ray's wrappers
(``library_errors``), and the filesystems' options in a Ray worker (``configure_storage``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

from openwebtext import codec
from openwebtext.errors import OWTError, install_hint
from openwebtext.source import configure

__all__ = [
    "EngineError",
    "configure_storage",
    "library_errors",
    "local_ray",
    "ray_module",
    "sweep_stale",
    "unwrap",
]

#: How to install what this module needs.


class EngineError(OWTError):
    """The Ray engine cannot run: Ray is not installed, or the cluster cannot be reached."""


def ray_module() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise EngineError(f"the Ray engine needs Ray: {install_hint('ray')}") from exc
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
    with it (the folders left by a driver killed with SIGKILL are removed at the next start:
    ``sweep_stale``). Unless ``RAY_AUTH_MODE`` says otherwise, it uses token
    authentication with a random token held in the environment, so that Ray writes no token
    file under the home folder.

    Raises:
        EngineError: Ray is not installed, or it cannot start or connect.
    """
    ray = ray_module()
    if ray.is_initialized():
        yield
        return
    if address:
        with _running(ray, f"cannot connect to the Ray cluster at {address}", address=address):
            yield
        return
    parent = _temp_parent()
    sweep_stale(parent)
    temp = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    _claim(temp)
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
        _stop_strays(temp)
        _auth_environment({k: saved[k] for k in private})
        _remove_temp(temp)


def _remove_temp(temp: str) -> None:
    """Remove a private instance's folder, its owner file last: what a process still writing
    kept from removal is left with its owner named, for ``sweep_stale`` to remove at the next
    start (it passes by a folder of no owner file: never this library's to remove)."""
    for name in os.listdir(temp) if os.path.isdir(temp) else []:
        if name != OWNER:
            path = os.path.join(temp, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)
    with contextlib.suppress(OSError):
        if os.listdir(temp) == [OWNER]:
            os.unlink(os.path.join(temp, OWNER))
            os.rmdir(temp)


#: Seconds the processes of a private instance have to end by themselves after ``shutdown``.
STRAY_GRACE = 3.0


def _stop_strays(temp: str) -> None:
    """Kill what is left of the private instance of ``temp`` once it was shut down: its
    processes in this process group, which name its folder or hold a file of it open (its
    agents retitle themselves ``ray::…``, but write their logs there; another instance's,
    in the same group, hold their own folder's). A Ctrl-C to the group ends the raylet before
    it stops its agents, which ignore SIGTERM and were left running, orphaned (Linux: read
    from ``/proc``)."""
    group, deadline = os.getpgrp(), time.monotonic() + STRAY_GRACE
    while (left := _strays(temp, group)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _strays(temp: str, group: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z" or int(fields[2]) != group:  # (state, then pgrp)
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                ours = temp.encode() in f.read()
            fds = f"/proc/{entry}/fd"
            ours = ours or any(os.readlink(f"{fds}/{fd}").startswith(temp + os.sep)
                               for fd in os.listdir(fds))  # fmt: skip
        except OSError:  # (gone meanwhile, or another user's)
            continue
        if ours:
            found.append(int(entry))
    return found


#: The name a private instance's temporary folder starts with.
PREFIX = "owt-ray-"
#: The file in it naming the driver that started the instance.
OWNER = "owt-owner.json"


def _claim(temp: str) -> None:
    with open(os.path.join(temp, OWNER), "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "host": socket.gethostname()}, f)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _mentioned(paths: list[str]) -> set[str]:
    """Which of ``paths`` a live process names on its command line (Ray's own processes
    name their session's folder)."""
    found: set[str] = set()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read()
        except OSError:
            continue
        found.update(p for p in paths if p.encode() in line)
    return found


def sweep_stale(parent: str) -> list[str]:
    """Remove the temporary folders of private instances whose driver is dead (a driver
    killed with SIGKILL cannot remove its own) and that no live process still names; the
    folders removed. A folder of another host, another user, or without an owner file is
    left alone."""
    stale = []
    for name in os.listdir(parent) if os.path.isdir(parent) else []:
        folder = os.path.join(parent, name)
        if not name.startswith(PREFIX):
            continue
        try:
            with open(os.path.join(folder, OWNER), encoding="utf-8") as f:
                owner = codec.parse(f.read())
            pid, host = int(owner["pid"]), str(owner["host"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host == socket.gethostname() and not _alive(pid):
            stale.append(folder)
    if not stale:
        return []
    removed = [folder for folder in stale if folder not in _mentioned(stale)]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


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
        _handlers_again()


def _handlers_again() -> None:
    """Set Python's handlers of SIGINT and SIGTERM again: ``ray.shutdown`` puts back, at the
    C level, what its failure-signal handler found when ``ray.init`` installed it (the default:
    a SIGTERM then killed ``owt`` outright, while Python still named its handler)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not None:
            signal.signal(signum, handler)


@contextlib.contextmanager
def _keep_sigterm() -> Iterator[None]:
    """Undo ``ray.init``'s SIGTERM handler (``sys.exit(15)``): the caller's stays in force
    (``owt tokenize`` turns SIGTERM into the same clean stop as Ctrl-C, exit status 143). A
    SIGTERM that came while ``ray.init`` ran (its handler's ``SystemExit(15)``) is handed to
    the caller's."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM or not callable(previous):
            raise
        signal.signal(signal.SIGTERM, previous)
        previous(signal.SIGTERM, None)  # (the caller's stop: it raises)
        raise
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


def unwrap(exc: BaseException) -> BaseException:
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
        error = unwrap(exc)
        if error is exc:
            raise
        raise error from None


_configured: list[dict[str, Any] | None] = [None]


def configure_storage(storage_options: dict[str, Any] | None) -> None:
    """In a Ray worker (not forked from the driver): the filesystems' options for URLs.

    Done once per worker process and set of options: ``source.configure`` drops the
    filesystems already made.
    """
    if storage_options is None or _configured[0] == storage_options:
        return
    configure(storage_options)
    _configured[0] = dict(storage_options)
