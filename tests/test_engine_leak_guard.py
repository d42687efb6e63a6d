"""The leak guard itself (tests/support.no_leaks): it fails on what this test's processes leave
behind, and only on that. (Reliability, issue #5.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import (
    no_leaks,
)

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
