"""Test helpers: reference reader, process checks, corpus builders."""

from __future__ import annotations

import io
import lzma
import os
import tarfile
from pathlib import Path


def plain_read(paths: list[Path]) -> dict[str, str]:
    """Every document of outer tars, read with tarfile and lzma only (not the library)."""
    docs: dict[str, str] = {}
    for path in paths:
        with tarfile.open(path) as outer:
            for member in outer:
                if not member.isreg():
                    continue
                raw = outer.extractfile(member).read()  # type: ignore[union-attr]
                with tarfile.open(fileobj=io.BytesIO(lzma.decompress(raw))) as inner:
                    for entry in inner:
                        text = inner.extractfile(entry).read().decode()  # type: ignore[union-attr]
                        assert entry.name not in docs
                        docs[entry.name] = text
    return docs


def child_pids(pid: int | None = None) -> list[int]:
    """Live (non-zombie) child processes of ``pid`` (default: this process), from /proc."""
    pid = os.getpid() if pid is None else pid
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == pid and state != "Z":
            children.append(int(entry))
    return children


def group_pids(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def compress_xz(data: bytes) -> bytes:
    return lzma.compress(data)


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
