"""Links, special files and hostile names in the tars: ignored, and names are never paths.
(Reliability, issue #5.)
"""

from __future__ import annotations

import io
import lzma
import os
import tarfile
from pathlib import Path

import pytest

from openwebtext import (
    Loader,
)
from support import (
    decoded,
)

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


# -- links, special files and hostile names ---------------------------------------------


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.mode = 0o755
    if kind in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        info.devmajor, info.devminor = 1, 3
    return info


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    """A tar of ``(header, data)`` entries; ``data`` None for non-regular entries."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return out.getvalue()


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


@pytest.mark.parametrize("policy", ["raise", "skip"])
def test_links_devices_and_directories_are_ignored_and_names_are_never_paths(
    policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Non-regular members are ignored in outer and inner tars; no name is ever written to."""
    token = f"owt-evil-{os.getpid()}-{policy}"
    hostile = [f"../../{token}", f"/etc/{token}", f"/tmp/{token}"]
    specials = [
        _special(hostile[0], tarfile.SYMTYPE, "/etc/passwd"),
        _special(hostile[1], tarfile.LNKTYPE, "doc-0.txt"),
        _special(hostile[2], tarfile.CHRTYPE),
        _special("sub/", tarfile.DIRTYPE),
        _special("fifo", tarfile.FIFOTYPE),
        _special("disk", tarfile.BLKTYPE),
    ]
    docs = {f"doc-{k}.txt": f"document {k}\n".encode() for k in range(8)}
    docs |= {f"{name}.txt": f"hostile name {name}\n".encode() for name in hostile}
    entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for k, (name, data) in enumerate(docs.items()):  # specials between regular files
        entries.append(_file(name, data))
        if k < len(specials):
            entries.append((specials[k], None))
    inner = _tar(entries)
    with tarfile.open(fileobj=io.BytesIO(inner)) as check:  # the specials are really there
        assert {m.type for m in check} >= {m.type for m in specials}
    member = lzma.compress(inner)
    outer = tmp_path / "outer.tar"
    outer_entries: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for k, name in enumerate(["good_data.xz", f"../../{token}.xz"]):
        outer_entries += [
            _file(name, member),
            (_special(f"{name}-link{k}", tarfile.SYMTYPE, f"/etc/{token}"), None),
            (_special(f"/etc/{token}-hard{k}", tarfile.LNKTYPE, name), None),
        ]
    outer_entries += [
        (_special("openwebtext/", tarfile.DIRTYPE), None),
        (_special(f"/dev/{token}", tarfile.CHRTYPE), None),
    ]
    outer.write_bytes(_tar(outer_entries))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = sorted(os.listdir(tmp_path))

    with Loader(str(outer), workers=2, on_error=policy, shuffle=False).iter() as it:
        got = [(d.member, d.name, d.text) for d in it]
        stats = it.stats

    want = [
        (m, name, text)
        for m in ("good_data.xz", f"{token}.xz")
        for name, text in decoded(docs).items()
    ]
    assert got == want  # regular documents only, in order, hostile names as plain strings
    assert (stats.skipped_members, stats.skipped_documents) == (0, 0)
    assert os.listdir(cwd) == []
    assert sorted(os.listdir(tmp_path)) == before
    written = [*hostile, *(f"{h}.txt" for h in hostile), f"../../{token}.xz", f"/dev/{token}"]
    written += [f"/etc/{token}-hard{k}" for k in (0, 1)]
    for name in written:
        assert not (cwd / name).exists(), name  # absolute names replace cwd
