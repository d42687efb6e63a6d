"""Test helpers: reference reader, process checks, corpus builders."""

from __future__ import annotations

import io
import lzma
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path


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
    """Live (non-zombie) child processes of ``pid`` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    return [p for p, state, ppid, _ in _processes() if ppid == pid and state != "Z"]


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    return [p for p, state, _, group in _processes() if group == pgid and state != "Z"]


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
    """Run ``owt ARGS`` in its own session, wait until it has ``processes`` processes, then
    send SIGINT to the whole group as Ctrl-C would.

    Its stdout is a pipe nobody reads, so a ``--jsonl`` stream blocks mid-way with its workers
    alive. Returns the exit code, stderr, and the group's processes left afterwards.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "openwebtext.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(group_pids(proc.pid)) < processes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(group_pids(proc.pid)) >= processes, f"owt {args} should have {processes}"
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, err.decode(), group_pids(proc.pid)


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
