"""The process's standard streams at start: a closed stdin, stdout or stderr is given
/dev/null (so no file opened later takes its number), and remembered in
``CLOSED_AT_START`` (``owt stream --jsonl`` refuses a closed stdout)."""

from __future__ import annotations

import fcntl
import os
import sys

__all__ = ["CLOSED_AT_START", "open_standard_streams"]

#: Standard descriptors found closed at start (and given /dev/null): {fd: True}.
CLOSED_AT_START: dict[int, bool] = {}


def open_standard_streams() -> None:
    """Give a closed stdin, stdout or stderr /dev/null.

    Otherwise the next file or pipe opened would take its number, and messages meant
    for stderr would go into it (or fail, ending the run).
    """
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:  # (an output open for reading only: a closed one's number taken before we ran,
            # as a pyenv shim's script takes a closed stderr's)
            if not fd or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                os.fstat(fd)
                continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        CLOSED_AT_START[fd] = True
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, "w" if fd else "r", closefd=False))  # noqa: SIM115
