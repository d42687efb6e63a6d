"""The leak guard itself (tests/support.no_leaks): it fails on what this test's processes leave
behind, and only on that. (Reliability, issue #5.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import _entries, _lasting_new, no_leaks

#: The reliability suite's leak guard: nothing a test starts or makes outlives it.
pytestmark = pytest.mark.usefixtures("leaves_nothing_behind")


_MAKE_TEMP_FOLDER = "import tempfile; print(tempfile.mkdtemp(prefix={!r}))"


def test_the_leak_guard_fails_on_our_leaks_only(tmp_path: Path) -> None:
    """A temp folder left by this test's processes fails it; one of another program does not."""
    system_tmp = "/tmp"
    with no_leaks(tmp_path / "others"):  # another program, with its own TMPDIR
        other = subprocess.run(
            [sys.executable, "-c", _MAKE_TEMP_FOLDER.format("owt-ray-")],
            env={**os.environ, "TMPDIR": system_tmp}, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    os.rmdir(other)
    assert Path(other).parent == Path(system_tmp)
    ours = tmp_path / "ours"
    with pytest.raises(AssertionError, match="temporary files left behind"), no_leaks(ours):
        # A child of this test.
        subprocess.run([sys.executable, "-c", _MAKE_TEMP_FOLDER.format("pymp-")], check=True)
    assert [p.name[:5] for p in ours.iterdir()] == ["pymp-"]


_HOLD_A_SEMAPHORE = (
    "import multiprocessing, sys\n"
    "sys.stdin.readline()\n"
    "lock = multiprocessing.get_context('spawn').Lock()\n"  # a named semaphore in /dev/shm
    "print(lock._semlock.name, flush=True)\n"
    "sys.stdin.read()\n"
)


def test_the_leak_guard_fails_on_our_shared_memory_only(tmp_path: Path) -> None:
    """A lasting /dev/shm entry this test's processes left counts; a live one another process
    maps (a spawn context's pool's semaphores, in a test running beside this one) does not."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    before = _entries("/dev/shm")
    other = subprocess.Popen([sys.executable, "-c", _HOLD_A_SEMAPHORE], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert other.stdin is not None and other.stdout is not None
    name = f"owt-leak-{os.getpid()}"
    left = Path("/dev/shm", name)
    try:
        other.stdin.write("go\n")
        other.stdin.flush()
        made = "sem." + other.stdout.readline().strip().lstrip("/")
        left.write_bytes(b"x" * 16)  # (what a segment this test made and never unlinked is)
        new = _lasting_new("/dev/shm", before)
        assert made in _entries("/dev/shm") and made not in new
        assert name in new
    finally:
        other.communicate("")
        left.unlink(missing_ok=True)
