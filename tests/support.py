"""Test helpers: reference reader, process checks, corpus builders, worker faults (``fault_on``),
running a loader to its end (``run``), what a stream hands out (``names``, ``texts``), ``owt``
run in this process (``run_owt``; the ``owt`` fixture of conftest.py), and the leak guard
(``no_leaks``)."""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import fcntl
import gc
import io
import json
import logging
import lzma
import multiprocessing
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import termios
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from openwebtext import Loader, OWTError, Stats, cli
from openwebtext.engine import Reader
from openwebtext.engine.member import Member
from openwebtext.records import Unit

MiB = 1 << 20


def read_members(paths: Iterable[Path]) -> dict[tuple[str, str], dict[str, str]]:
    """Every document of outer tars of xz members, per member, using tarfile and lzma only
    (not the library): ``{(file name, member name): {document name: text}}``."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for path in paths:
        with tarfile.open(path) as outer:
            for member in outer:
                if not member.isreg():
                    continue
                raw = outer.extractfile(member).read()  # type: ignore[union-attr]
                docs: dict[str, str] = {}
                with tarfile.open(fileobj=io.BytesIO(lzma.decompress(raw))) as inner:
                    for entry in inner:
                        if entry.isreg():
                            docs[entry.name] = inner.extractfile(entry).read().decode()  # type: ignore[union-attr]
                out[(path.name, member.name)] = docs
    return out


def plain_read(paths: list[Path]) -> dict[str, str]:
    """Every document of outer tars, in file and member order (``read_members``, flattened);
    a document name must not appear twice."""
    docs: dict[str, str] = {}
    for member_docs in read_members(paths).values():
        for name, text in member_docs.items():
            assert name not in docs
            docs[name] = text
    return docs


def _processes() -> list[tuple[int, str, int, int]]:
    """(pid, state, parent pid, process group) of every process, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found.append((int(entry), fields[0], int(fields[1]), int(fields[2])))
    return found


def child_pids(pid: int | None = None) -> list[int]:
    """Live (non-zombie) child processes of ``pid`` (default: this process), but the resource
    tracker multiprocessing starts once for the process's life at the first spawned worker
    (torch's ``multiprocessing_context="spawn"``): not one of ours to stop."""
    pid = os.getpid() if pid is None else pid
    live = [p for p, state, ppid, _ in _processes() if ppid == pid and state != "Z"]
    return [p for p in live if not _tracker(p)]


def _tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"multiprocessing.resource_tracker import main" in f.read()
    except OSError:  # (gone meanwhile)
        return False


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    return [p for p, state, _, group in _processes() if group == pgid and state != "Z"]


def _signal_masks(pid: int) -> tuple[int, int]:
    """(ignored, caught) signal masks of ``pid``, from /proc (0, 0 once it is gone)."""
    masks = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("SigIgn", "SigCgt"):
                    masks[key] = int(value, 16)
    except OSError:
        return 0, 0
    return masks.get("SigIgn", 0), masks.get("SigCgt", 0)


def _has(mask: int, signum: int) -> bool:
    return bool(mask & (1 << (signum - 1)))


def ready_for_signals(pgid: int, processes: int) -> bool:
    """Whether the ``owt`` command leading group ``pgid`` is where a test may signal it: at
    least ``processes`` live processes, the command's handler in place (it catches SIGTERM,
    which Python alone never does), and every other process (its workers) ignoring SIGINT.

    A count of processes alone is not enough: a worker is counted from its fork, but takes
    the default SIGINT (the command's handler is not inherited) until it sets it ignored,
    and a Ctrl-C to the group in between kills it; on a busy machine that lasted longer than
    any sleep a test could choose.
    """
    pids = group_pids(pgid)
    if len(pids) < processes or not _has(_signal_masks(pgid)[1], signal.SIGTERM):
        return False
    return all(_has(_signal_masks(pid)[0], signal.SIGINT) for pid in pids if pid != pgid)


def pipe_bytes(fd: int) -> int:
    """Bytes waiting to be read in the pipe ``fd`` (``FIONREAD``)."""
    found = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, found, True)
    return found[0]


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``seconds`` pass (False): a bound on a
    wait for a state, never a pace."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def gone(pgid: int, seconds: float = 30.0) -> list[int]:
    """The live processes of group ``pgid`` once they are all gone or ``seconds`` passed.

    A process's pipes close before the kernel has made it a zombie: a test that read EOF
    from them may still see it alive for a moment (longer on a busy machine)."""
    wait_until(lambda: group_pids(pgid) == [], seconds)
    return group_pids(pgid)


def hang_report(pgid: int, stderr: Any = None) -> str:
    """What each process of group ``pgid`` was doing when a test gave up waiting for it: its
    state, kernel wait channel and command line, then the Python stacks of every thread of
    each (started with ``PYTHONFAULTHANDLER=1``: SIGABRT makes it print them to ``stderr``,
    read here from the leader's pipe). The processes are killed after."""
    lines = []
    for pid, state, ppid, _ in sorted(p for p in _processes() if p[3] == pgid):
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            wchan = cmd = "?"
        lines.append(f"pid {pid} (parent {ppid}) state {state} waiting in {wchan!r}: {cmd}")
    for pid in group_pids(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGABRT)
    gone(pgid, 10)
    for pid in group_pids(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            lines.append(stderr.read().decode(errors="replace"))
    return "\n".join(lines)


def inner_tar(docs: dict[str, bytes], fmt: int = tarfile.GNU_FORMAT) -> bytes:
    """A tar of documents, as inside a member."""
    bio = io.BytesIO()
    with tarfile.open(fileobj=bio, mode="w", format=fmt) as tar:
        for name, data in docs.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1555000000
            tar.addfile(info, io.BytesIO(data))
    return bio.getvalue()


def xz_member(docs: dict[str, bytes]) -> bytes:
    """An xz member holding ``docs``, as in the corpus (preset 0: fast to make)."""
    return lzma.compress(inner_tar(docs), preset=0)


def corrupt_member(docs: dict[str, bytes]) -> bytes:
    """An xz member of ``docs`` with bits flipped halfway: it fails whole (``CorruptMember``)."""
    broken = bytearray(xz_member(docs))
    broken[len(broken) // 2] ^= 0x10
    return bytes(broken)


def cut_member(docs: dict[str, bytes], keep: float = 0.5) -> bytes:
    """The first ``keep`` of an xz member of ``docs``, as an interrupted download leaves it
    (``TruncatedMember``: the documents before the cut are read, see ``docs_before_cut``)."""
    whole = xz_member(docs)
    return whole[: int(len(whole) * keep)]


def outer_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A plain tar holding ``members`` (name, bytes) as regular files."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def sample_docs(prefix: str, n: int) -> dict[str, bytes]:
    return {
        f"{prefix}-{k:03d}.txt": f"document {k} of {prefix} — “quoted” café\n".encode() * (k + 1)
        for k in range(n)
    }


def member_offset(path: Path, member: str) -> tuple[int, int]:
    """(offset, size) of ``member`` in the outer tar at ``path``."""
    with tarfile.open(path) as tar:
        info = tar.getmember(member)
        return info.offset_data, info.size


def damage(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of ``path`` at ``offset``."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def interrupt_owt(args: list[str], processes: int) -> tuple[int, str, list[int]]:
    """Run ``owt ARGS`` in its own session, wait until it is under way (``processes``
    processes ready for signals, output in the pipe), then send SIGINT to the whole group as
    Ctrl-C would.

    Its stdout is a pipe nobody reads, so a ``--jsonl`` stream blocks mid-way with its workers
    alive. Returns the exit code, stderr, and the group's processes left afterwards.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "openwebtext.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # A background job of a shell starts with SIGINT ignored, and its children inherit
        # that: the Ctrl-C this sends must find the default disposition, whatever ours is.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    try:
        # Under way: its handler and workers in place, and its first lines in the pipe.
        under_way = wait_until(
            lambda: ready_for_signals(proc.pid, processes) and pipe_bytes(proc.stdout.fileno()) > 0,
            60,
        )
        assert under_way, f"owt {args} should have {processes} processes and some output"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err.decode(), gone(proc.pid)


def docs_before_cut(compressed: bytes) -> dict[str, str]:
    """The documents of a cut-short xz member that end before the cut, read with lzma and
    tarfile only (not the library): what ``on_error="skip"`` must still deliver."""
    data = lzma.LZMADecompressor().decompress(compressed)
    docs: dict[str, str] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for entry in tar:
                end = entry.offset_data + entry.size
                if entry.isreg() and end <= len(data):
                    docs[entry.name] = data[entry.offset_data : end].decode()
    except tarfile.TarError:
        pass  # the cut: what came before it is listed
    return docs


def s3_objects(endpoint: str, prefix: str) -> dict[str, bytes]:
    """Every object under ``s3://owt/PREFIX``, by its name under the prefix (boto3, not the
    library's own filesystem, so that nothing is read from a cache)."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    listed = client.list_objects_v2(Bucket="owt", Prefix=prefix).get("Contents", [])
    return {
        o["Key"][len(prefix) :]: client.get_object(Bucket="owt", Key=o["Key"])["Body"].read()
        for o in listed
    }


def local_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


# -- worker faults -------------------------------------------------------------------------


def kill_self() -> None:
    """A worker's death: SIGKILL to itself."""
    os.kill(os.getpid(), signal.SIGKILL)


def hang() -> None:
    """A worker's hang: the pool must kill it after ``timeout``."""
    time.sleep(3600)


FAULTS: dict[str, Callable[[], object]] = {"kill": kill_self, "hang": hang}


def fault_on(
    members: str | Collection[str],
    action: str | Callable[[], object],
    *,
    attempts: Path | None = None,
    times: int | None = None,
) -> Callable[[Reader, Unit], Member]:
    """A ``Reader.read`` that makes its worker die (``"kill"``), hang (``"hang"``) or run
    ``action`` (e.g. raise) when it reads one of ``members``; other units read as before.

    Each attempt at one of ``members`` appends the worker's pid to ``attempts``; with
    ``times``, only the first ``times`` attempts fail (None: every one). The real
    ``Reader.read`` is the one patched in when this is called, so patches chain. Workers are
    forked, so they inherit the patch (the ``worker_fault`` fixture of conftest sets it).
    """
    real = Reader.read
    names = {members} if isinstance(members, str) else set(members)
    act = FAULTS[action] if isinstance(action, str) else action
    if times is not None and attempts is None:
        raise ValueError("times needs an attempts file to count them in")

    def read(self: Reader, unit: Unit) -> Member:
        if unit.member in names:
            tried = 1
            if attempts is not None:
                with open(attempts, "a") as f:
                    f.write(f"{os.getpid()}\n")
                tried = len(attempts.read_text().split())
            if times is None or tried <= times:
                act()
        return real(self, unit)

    return read


# -- the reliability suite's corpus and runs (issue #5) ------------------------------------

ROOT = Path(__file__).resolve().parents[1]

#: A member in the middle of the small corpus, and the last one (corpus order).
MIDDLE = ("urlsf_subset00.tar", "openwebtext/urlsf_subset00-2_data.xz")
LAST = ("urlsf_subset01.tar", "openwebtext/urlsf_subset01-3_data.xz")

#: Hang bound for one run over a tiny corpus: far above any legitimate run.
HANG_BOUND = 30.0

Docs = dict[str, str]
Members = dict[tuple[str, str], Docs]


# -- corpus builders (the independent reader is support.read_members) --------------------


#: Small documents of three made-up members (``sample_docs``).
A, B, U = sample_docs("a", 5), sample_docs("b", 4), sample_docs("u", 3)


def all_but(members: Members, *excluded: tuple[str, str]) -> Docs:
    """The documents of every member except ``excluded``."""
    docs: Docs = {}
    for key, member_docs in members.items():
        if key not in excluded:
            docs.update(member_docs)
    return docs


def decoded(docs: dict[str, bytes]) -> Docs:
    """``docs`` as text."""
    return {name: data.decode() for name, data in docs.items()}


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def xz_zeros(blocks: int, block_bytes: int = 16 * MiB) -> bytes:
    """A valid single-stream xz file of ``blocks * block_bytes`` zero bytes, built cheaply.

    Compresses one block of zeros once and repeats it, with an index listing every
    copy, so a 2 GiB bomb costs ~0.1 s and one 16 MiB buffer to make (streaming 2 GiB
    through ``LZMACompressor`` would take ~15 s).

    Args:
        blocks: How many copies of the block.
        block_bytes: Uncompressed size of each block.

    Returns:
        The compressed bytes (about 2.5 KB per 16 MiB block).
    """
    one = lzma.compress(bytes(block_bytes), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=0)
    header, footer = one[:12], one[-12:]
    index_size = (struct.unpack("<I", footer[4:8])[0] + 1) * 4
    index = one[-12 - index_size : -12]
    block = one[12 : -12 - index_size]
    count, pos = read_varint(index, 1)
    unpadded, pos = read_varint(index, pos)
    size, _ = read_varint(index, pos)
    assert (index[0], count, size) == (0, 1, block_bytes)
    body = b"\x00" + varint(blocks) + (varint(unpadded) + varint(size)) * blocks
    body += bytes(-len(body) % 4)
    new_index = body + struct.pack("<I", zlib.crc32(body))
    flags = footer[8:10]
    backward = struct.pack("<I", len(new_index) // 4 - 1)
    new_footer = struct.pack("<I", zlib.crc32(backward + flags)) + backward + flags + b"YZ"
    return header + block * blocks + new_index + new_footer


def flip_bit(path: Path, offset: int, mask: int = 0x10) -> None:
    """Flip the bits of ``mask`` in the byte of ``path`` at ``offset``."""
    with open(path, "rb") as f:
        f.seek(offset)
        byte = f.read(1)[0]
    damage(path, offset, bytes([byte ^ mask]))


def copy_corpus(small_corpus: Path, tmp_path: Path) -> Path:
    """A private copy of the small corpus, to damage."""
    return Path(shutil.copytree(small_corpus, tmp_path / "corpus"))


# -- running a loader ---------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run delivered, and how it ended."""

    docs: Docs
    stats: Stats | None
    error: OWTError | None
    at_open: bool


def run(paths: Path | list[Path], **options: Any) -> Outcome:
    """Read everything; return the documents (asserting none comes twice) and the end.

    Only the library's own errors are caught: anything else fails the calling test.
    """
    targets = [str(p) for p in paths] if isinstance(paths, list) else str(paths)
    try:
        loader = Loader(targets, **options)
    except OWTError as exc:
        return Outcome({}, None, exc, True)
    docs: Docs = {}
    it = loader.iter()
    try:
        for doc in it:
            assert doc.name not in docs, f"{doc.name} delivered twice"
            docs[doc.name] = doc.text
    except OWTError as exc:
        return Outcome(docs, it.stats, exc, False)
    finally:
        it.close()
    return Outcome(docs, it.stats, None, False)


def names(documents: Iterable[Any]) -> list[str]:
    """The names of what ``documents`` (a loader, its iterator, a list) hands out, in order."""
    return [doc.name for doc in documents]


def texts(corpus: Any, **options: Any) -> list[str]:
    """The texts a ``Loader`` over ``corpus`` (a ``Corpus``, a path or a URL) hands out."""
    return [doc.text for doc in Loader(corpus, **options)]


def jsonl_names(stdout: str) -> list[str]:
    """The document names of ``owt stream --jsonl``'s lines."""
    return [json.loads(line)["name"] for line in stdout.splitlines()]


# -- owt in this process ----------------------------------------------------------------


@dataclass
class Ran:
    """How one ``owt`` run ended (the fields of ``subprocess.CompletedProcess`` the tests read)."""

    returncode: int
    stdout: str
    stderr: str


#: The ``owt`` fixture: ``owt(*args)`` runs the command in this process.
Owt = Callable[..., Ran]


def run_owt(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """``owt ARGS`` through ``cli.main`` in this process: its exit code (argparse's too) and
    what it printed. For tests of what a command does; a test of exit by signal, of the
    process tree or of the standard streams at start runs ``owt`` as a process."""
    capsys.readouterr()  # what the test printed before is not the command's
    try:
        code = cli.main(list(args))
    except SystemExit as exit:  # argparse: a bad argument, --help
        code = exit.code if isinstance(exit.code, int) else 1
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def where(path: str, member: str | None) -> str:
    """How the library names a member: ``file[member]``."""
    return f"{path}[{member}]"


# -- the leak guard ---------------------------------------------------------------------


def fd_table() -> dict[str, str]:
    """This process's open descriptors and what each points at."""
    table = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            table[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor listdir itself used
            continue
    return table


#: Names that multiprocessing, shared memory or this library would give to what it leaves.
OURS = re.compile(r"^(pymp-|psm_|wnsm_|sem\.|mp-)|owt|openwebtext")


def _entries(folder: str) -> set[str]:
    """Entries of a shared folder (other programs use it too) that could be ours."""
    try:
        return {e for e in os.listdir(folder) if OURS.search(e)}
    except FileNotFoundError:
        return set()


def _lasting_new(folder: str, before: set[str]) -> set[str]:
    """Entries of ``folder`` not in ``before``, ignoring ones another process removes soon and
    ones another process maps (a named semaphore of a spawn context's pool, say, in a test
    running beside this one: alive there, no leak of this test's, whose processes are gone)."""
    new = _entries(folder) - before
    if new:
        time.sleep(0.5)
        new &= _entries(folder)
    if not new:
        return new
    mapped = _mapped_elsewhere(folder)
    return {e for e in new if _inode(os.path.join(folder, e)) not in mapped}


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _mapped_elsewhere(folder: str) -> set[int]:
    """The inodes of files of ``folder`` that a live process other than this one maps
    (Linux's ``/proc/PID/maps``, by inode: a semaphore is mapped under the temporary name it
    was made with, then linked to its own; elsewhere, none is known)."""
    found: set[int] = set()
    prefix = folder.rstrip("/") + "/"
    for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else ()):
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                found.update(int(line.split()[4]) for line in maps if prefix in line)
        except (OSError, ValueError, IndexError):  # (gone meanwhile, or not ours to read)
            continue
    return found


def _lasting_new_fds(before: dict[str, str]) -> dict[str, str]:
    """Descriptors open now that were not before (or now point elsewhere), after a moment.

    Only new ones count: a descriptor an earlier test left to a background thread (an
    fsspec event loop's socket, say) may close while this test runs, which is no leak of
    this test's; one opened meanwhile by such a thread is given half a second to close.
    """
    new = {fd: target for fd, target in fd_table().items() if before.get(fd) != target}
    if new:
        gc.collect()
        time.sleep(0.5)
        new = {fd: target for fd, target in fd_table().items() if before.get(fd) != target}
    return new


@contextlib.contextmanager
def no_leaks(private: Path) -> Iterator[Path]:
    """Fail if the code run inside leaves a worker, a descriptor, a /dev/shm entry or a temp file.

    ``TMPDIR`` points at ``private``, a new empty folder, inherited by workers and
    subprocesses: every temporary file or folder made meanwhile by this test's processes
    (with ``tempfile``, and multiprocessing's ``pymp-*`` folder, whose per-process cache
    is cleared for the while) lands there, and it must still be empty at the end. So only
    what this test's processes made is looked at: the system temp folder, where other
    programs on the machine make ``pymp-*`` or ``owt-ray-*`` folders at any time, is not.
    /dev/shm (names do not follow ``TMPDIR``) must gain no lasting entry named like ours.
    """
    private.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(private))
        patch.setattr(tempfile, "tempdir", None)
        # A pymp-* folder made before would stand outside ``private``, unseen.
        patch.delitem(multiprocessing.process.current_process()._config, "tempdir", False)
        shm = _entries("/dev/shm")
        fds = fd_table()
        yield private
        assert child_pids() == [], "worker processes left behind"
        assert _lasting_new_fds(fds) == {}, "file descriptors left open"
        assert list(private.iterdir()) == [], "temporary files left behind"
        assert _lasting_new("/dev/shm", shm) == set(), "shared memory left behind"


class NumberedBatches:
    """Batches 1, 2, ... of ``n`` (2 x 3 arrays of the number), the number taken as state;
    ``fail_at``: that batch raises a RuntimeError ("batch K is broken"); remembers being
    closed. A stand-in source of ``ahead`` and ``to_device``."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at, self.taken, self.closed = n, fail_at, 0, False

    def __iter__(self) -> Iterator[Any]:
        import numpy as np

        while self.taken < self.n:
            if self.taken == self.fail_at:
                raise RuntimeError(f"batch {self.taken} is broken")
            self.taken += 1
            yield np.full((2, 3), self.taken)

    def state_dict(self) -> dict[str, Any]:
        return {"taken": self.taken}

    def close(self) -> None:
        self.closed = True


def in_read_only_mount(folder: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a mount namespace of its own where ``folder`` is a read-only bind
    mount of itself (nothing outside the namespace sees the mount; needs root and
    ``unshare(1)``)."""
    script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(folder), *command],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def bestfit_doc_names(batch: Any) -> list[str]:
    """The documents of a best-fit ``PackedBatch`` of ``tokenizer="bytes"`` ids (each row holds
    whole documents: every one fits a row), by the first word of each."""
    out = []
    for row in range(batch.tokens.shape[0]):
        segments, ids = batch.segment_ids[row], batch.tokens[row]
        for s in sorted(set(segments.tolist()) - {0}):
            assert batch.positions[row][segments == s][0] == 0  # (whole: from its start)
            text = bytes(int(i) for i in ids[segments == s] if i < 256)
            out.append(text.split()[0].decode())
    return out


def check_once_under_even(
    epoch: collections.Counter[str], got: collections.Counter[str], even: str | None,
    dropped: int, repeated: int,
) -> None:  # fmt: skip
    """What an epoch handed out (``got``) against its documents (``epoch``): each once under
    ``even=None``; under ``drop``/``pad`` the extra copies are the ``repeated`` counted, and what
    is missing at most the ``dropped`` counted (nothing under ``pad``)."""
    assert set(got) <= set(epoch), sorted(set(got) - set(epoch))  # nothing skipped or foreign
    missing, extra = epoch - got, got - epoch
    if even is None:
        assert got == epoch, (sorted(missing.elements()), sorted(extra.elements()))
        return
    assert sum(extra.values()) == repeated, (sorted(extra.elements()), repeated)
    if even == "pad":
        assert not missing, sorted(missing.elements())
    else:
        assert sum(missing.values()) <= dropped, (sorted(missing.elements()), dropped)


def check_each(cases: Iterable[Any], check: Callable[[Any], None]) -> None:
    """``check`` each case, the library's warnings quieted (a grid's evened-out shares say
    theirs); an ``AssertionError`` names its case."""
    logger = logging.getLogger("openwebtext")
    logger.setLevel(logging.ERROR)
    try:
        for case in cases:
            try:
                check(case)
            except AssertionError as exc:
                raise AssertionError(f"{case}: {exc}") from exc
    finally:
        logger.setLevel(logging.NOTSET)


def kept_of_shares(
    counts: Sequence[int], docs: Sequence[Sequence[str]], bad: Collection[str], ranks: int, *,
    shuffle: bool, seed: int, even: str | None,
) -> collections.Counter[str]:  # fmt: skip
    """The kept documents (not in ``bad``) of an epoch's ``ranks`` shares by the plan (units of
    ``counts`` documents named ``docs``): a document in two shares, ``pad``'s, twice; one in
    none, ``drop``'s, not at all. The oracle of what a resharded epoch hands out."""
    from openwebtext.plan import EpochShares, plan

    shares = EpochShares(plan(len(counts), shuffle=shuffle, seed=seed, epoch=0), list(counts))
    rule = even if ranks > 1 else None
    out: collections.Counter[str] = collections.Counter()
    for r in range(ranks):
        share = shares.share(r, ranks, rule)  # type: ignore[arg-type]
        for p, unit in enumerate(share.units):
            lo, hi = share.trims.get(p, (0, counts[unit]))
            out.update(d for d in docs[unit][lo:hi] if d not in bad)
    return out


def lock_file_read_only(monkeypatch: Any) -> None:
    """The prepare lock file cannot be created (EROFS), as on a read-only mount: tests run as
    root, for whom a folder's mode is no bar."""
    from openwebtext.prepare.lock import LOCK

    real_open = os.open

    def refuse(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        if os.fspath(path).endswith(LOCK):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)


def rewrite_later(path: Path, body: bytes) -> None:
    """Write ``body`` to ``path``, its mtime a second later than before (a coarse clock's
    rewrite within its tick still changes it: the inode or size may not)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_bytes(body)
    later = max(before, path.stat().st_mtime_ns) + 10**9
    os.utime(path, ns=(later, later))


def fit_window(packing: str, window: int) -> int | None:
    """``window`` for best fit; None for concat (which refuses a window)."""
    return window if packing == "bestfit" else None


def copy_run(token_run: Path, to: Path, names: tuple[str, ...]) -> Path:
    """A folder ``to`` holding ``token_run``'s ``meta.json`` and the files ``names``."""
    to.mkdir()
    for name in ("meta.json", *names):
        shutil.copy(token_run / name, to / name)
    return to


def held_reads(monkeypatch: pytest.MonkeyPatch, at: int = 2) -> tuple[Any, Any]:
    """Reads in this process (``workers=0``) wait at unit ``at``: the first event returned is
    set there, and they go on once the second is."""
    import threading

    from openwebtext.engine import inline

    inside, go, seen, read = threading.Event(), threading.Event(), [], inline.read_unit

    def read_unit(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        if len(seen) == at:
            inside.set()
            assert go.wait(30)
        return read(*args, **kwargs)

    monkeypatch.setattr(inline, "read_unit", read_unit)
    return inside, go


def stateful_items(items: list[Any]) -> Any:
    """``items`` as batches with a state (``Stateful``: what ``ahead``/``to_device`` read):
    each ``iter`` from the first, and always the state ``{}``."""

    class Items:
        def __iter__(self) -> Iterator[Any]:
            return iter(items)

        def state_dict(self) -> dict[str, Any]:
            return {}

    return Items()

