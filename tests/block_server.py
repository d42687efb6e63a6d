"""Runs the Python blocks of tests/test_docs_blocks.py from one warm interpreter.

Started once per test module with the blocks' environment, it imports the heavy modules once
(NumPy, openwebtext, and torch where installed: ~2.5 s of CPU each time a block starts a
fresh interpreter for them), then reads jobs on stdin, one JSON line each (``script``,
``cwd``, ``stdout``, ``stderr``: paths), and forks a child per job. The child is what
``python block.py`` in ``cwd`` would be: a new session (its workers are killed with it),
stdin from /dev/null, stdout and stderr to the files, ``__main__`` the script, and the
interpreter's own exit (threads joined, atexit run, exit code from ``SystemExit`` or 1 on an
uncaught exception, with its traceback). This process answers ``{"pid": ...}`` at once and
``{"code": ...}`` when the child has ended.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
from importlib.util import find_spec

PRELOAD = ("numpy", "openwebtext", "torch", "openwebtext.torch")


def _child(job: dict[str, str]) -> None:
    os.setsid()
    os.chdir(job["cwd"])
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = [job["script"]]
    sys.path[0] = os.path.dirname(job["script"])
    runpy.run_path(job["script"], run_name="__main__")


def main() -> None:
    for name in PRELOAD:
        if find_spec(name.split(".")[0]) is not None:
            importlib.import_module(name)
    for line in sys.stdin:
        job = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(job)  # an exception or SystemExit ends the child as it ends a script
            sys.exit(0)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
