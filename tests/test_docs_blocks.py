"""Every Python and shell block of README.md and docs/*.md runs: on the small corpus in the
default run, and on the README's built-in corpus in the slow group.

A block is a fenced block tagged ``python`` or ``bash``; ``text`` blocks are not code. HTML
comments on the lines right above a block say how it runs:

- ``<!-- skip: why -->``: not run (an S3 URL, a checkout of nanoGPT, an install), reported as
  skipped with its file, line and reason; its syntax is still checked;
- ``<!-- slow: why -->``: run only in the slow group (``-m slow``);
- ``<!-- ray: why -->``: run only in the Ray group (``-m ray``, the ``ray`` extra);
- ``<!-- needs: torch tiktoken -->``: run where those modules import, else skipped.

Each block runs alone, in a fresh process and an empty folder (in the default run, a Python
block in a child forked from one warm interpreter, ``block_server.py``, that has imported torch
once), with ``CORPUS`` (a Python variable of a hidden first line, and a shell variable) the path
of a counted copy of the small corpus. That copy is also the built-in corpus of the run
(``OWT_CACHE_DIR`` points to a cache folder that holds it as the default corpus), so
``owt stream`` with no path,
``owt synth --where`` and ``default_corpus()`` read it. ``owt`` is this checkout's. A block has
``BLOCK_SECONDS`` to finish: one that loops forever fails, named, instead of hanging the suite.

The slow group runs every block that is not skipped (those noted ``slow`` only there) again
on a copy of the built-in corpus itself (``default_corpus()``: 30 members, 11,700 documents,
made once in the user's cache), not counted, as a new user's is, with ``BUILTIN_SECONDS``
each and at most ``OPEN_FILES`` open files (a common default: a block that holds a file per
batch fails here, as it did for a user).
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

import openwebtext
from openwebtext.synth import COMPLETE_MARKER, default_corpus, default_corpus_path

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(openwebtext.__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Files whose blocks are not ours to mark: they are run only when tagged, and this says why
#: the untagged ones are not (their content is kept as its owner wrote it).
NOT_OURS = {"docs/benchmarks.md": "owt bench and benchmarks/ runs take minutes"}
RUNNABLE = {"python", "bash"}
BLOCK_SECONDS = 120
BUILTIN_SECONDS = 2400  # the slowest (training.md's reshard) took 11 min at a load of 10
OPEN_FILES = 1024

FENCE = re.compile(r"^```(\S*)\s*$")
NOTE = re.compile(r"^<!--\s*(skip|slow|ray|needs)\s*:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    file: str  # relative to the repository
    line: int  # of the opening fence, from 1
    language: str
    code: str
    notes: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line}"

    def note(self, kind: str) -> str | None:
        return next((why for k, why in self.notes if k == kind), None)


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the notes on the lines right above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{path.name}:{i + 1}: a block that never closes"
        notes, k = [], i - 1
        while k >= 0 and (note := NOTE.match(lines[k])):
            notes.insert(0, (note.group(1), note.group(2)))
            k -= 1
        rel = path.relative_to(ROOT).as_posix()
        found.append(Block(rel, i + 1, fence.group(1), "\n".join(lines[i + 1 : end]) + "\n",
                           tuple(notes)))  # fmt: skip
        i = end + 1
    return found


ALL = [block for path in DOCS for block in blocks_of(path)]
CODE = [block for block in ALL if block.language in RUNNABLE]
THEIRS = [block for block in ALL if not block.language and block.file in NOT_OURS]


def params() -> list[object]:
    out = [
        pytest.param(
            block,
            marks=pytest.mark.skip(reason=f"{block.name}: {NOT_OURS[block.file]}"),
            id=block.name,
        )
        for block in THEIRS
    ]
    for block in CODE:
        marks: list[pytest.MarkDecorator] = []
        if why := block.note("skip"):
            marks.append(pytest.mark.skip(reason=f"{block.name}: {why}"))
        elif block.note("slow") is not None:
            continue  # run in the slow group only, on the built-in corpus
        if block.note("ray") is not None:
            marks.append(pytest.mark.ray)
        out.append(pytest.param(block, marks=marks, id=block.name))
    return out


def environment(corpus: Path, cache: Path, bin_dir: Path) -> dict[str, str]:
    """The environment of a block: ``corpus`` (also the run's built-in corpus, in ``cache``),
    this checkout's package and ``owt``."""
    owt = bin_dir / "owt"
    owt.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m openwebtext.cli "$@"\n')
    owt.chmod(0o755)
    python = bin_dir / "python"  # `python` in a block is this interpreter (run by its path,
    # not a link to it: a virtual environment's interpreter finds its pyvenv.cfg beside it)
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "COV_", "OWT_"))}
    env.update(
        CORPUS=str(corpus),
        OWT_CACHE_DIR=str(cache),
        PYTHONPATH=os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PATH=os.pathsep.join([str(bin_dir), env.get("PATH", "")]),
        TQDM_DISABLE="1",
        PYTHONWARNINGS="ignore,default::DeprecationWarning",  # to see our deprecations
    )
    return env


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory, indexed: Path) -> dict[str, str]:
    """The small corpus's environment (a counted copy, also the run's built-in corpus)."""
    cache = tmp_path_factory.mktemp("owt-cache")
    corpus = default_corpus_path(cache)
    shutil.copytree(indexed, corpus)
    (corpus / COMPLETE_MARKER).touch()
    return environment(corpus, cache, tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="module")
def builtin_place(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The built-in corpus's environment: a copy of it (made once in the user's cache, as
    the README's first command makes it), not counted."""
    made = default_corpus(progress=False)
    cache = tmp_path_factory.mktemp("owt-builtin-cache")
    corpus = default_corpus_path(cache)
    shutil.copytree(made, corpus, ignore=lambda _, names: [n for n in names if "count" in n])
    assert (corpus / COMPLETE_MARKER).exists()
    return environment(corpus, cache, tmp_path_factory.mktemp("bin"))


def _few_open_files() -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


class Warm:
    """The blocks' warm interpreter (``block_server.py``): each Python block runs in a child
    it forks, as ``python block.py`` would run, without paying the interpreter's start and
    torch's import again."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.folder = folder  # where the children's stdout and stderr are written
        server = [sys.executable, str(Path(__file__).with_name("block_server.py"))]
        self.proc = subprocess.Popen(server, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)  # fmt: skip
        self.pending = b""  # what the server said past the last line read

    def _answer(self, timeout: float) -> dict[str, int]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                raise TimeoutError
            got = os.read(self.proc.stdout.fileno(), 4096)
            assert got, f"the block server ended (exit {self.proc.wait()})"
            self.pending += got
        line, self.pending = self.pending.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer

    def run(self, block: Block, script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None
        out, err = self.folder / f"{cwd.name}.out", self.folder / f"{cwd.name}.err"
        job = {"script": str(script), "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        self.proc.stdin.write(json.dumps(job).encode() + b"\n")
        self.proc.stdin.flush()
        pid = self._answer(60)["pid"]
        try:
            code = self._answer(BLOCK_SECONDS)["code"]
        except TimeoutError:
            os.killpg(pid, signal.SIGKILL)  # its session: the block and its workers
            pytest.fail(f"{block.name} ran for more than {BLOCK_SECONDS} s (endless?)")
        command = [sys.executable, str(script)]
        return subprocess.CompletedProcess(command, code, out.read_text(), err.read_text())

    def close(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def warm(place: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warm]:
    server = Warm(place, tmp_path_factory.mktemp("block-output"))
    yield server
    server.close()


def run(
    block: Block,
    env: dict[str, str],
    folder: Path,
    seconds: int = BLOCK_SECONDS,
    warm: Warm | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``block`` in ``folder``: a Python block as ``python block.py`` (in ``warm``'s fork
    when given, else a fresh interpreter), a shell block with ``bash -euo pipefail``."""
    for name in ("examples", "benchmarks"):  # blocks run commands from the repository root
        (folder / name).symlink_to(ROOT / name)
    if block.language == "python":
        script = folder / "block.py"
        script.write_text(f"import os; CORPUS = os.environ['CORPUS']\n{block.code}")
        if warm is not None:
            return warm.run(block, script, folder)
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-u", "-o", "pipefail", "-c", block.code]
    try:
        limit = _few_open_files if os.name == "posix" else None
        return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                              timeout=seconds, stdin=subprocess.DEVNULL,
                              preexec_fn=limit)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name} ran for more than {seconds} s (endless?)")


def builtin_params() -> list[object]:
    """Every block that runs, in the slow group (those of the Ray group also in it)."""
    out = []
    for block in CODE:
        if block.note("skip"):
            continue
        marks = [pytest.mark.slow, pytest.mark.timeout(BUILTIN_SECONDS + 60)]
        if block.note("ray") is not None:
            marks.append(pytest.mark.ray)
        out.append(pytest.param(block, marks=marks, id=block.name))
    return out


@pytest.mark.parametrize("block", params())
def test_block_runs(block: Block, place: dict[str, str], warm: Warm, tmp_path: Path) -> None:
    check_runs(block, place, tmp_path, BLOCK_SECONDS, warm)


@pytest.mark.parametrize("block", builtin_params())
def test_block_runs_on_the_builtin_corpus(
    block: Block, builtin_place: dict[str, str], tmp_path: Path
) -> None:
    check_runs(block, builtin_place, tmp_path, BUILTIN_SECONDS)


def check_runs(
    block: Block, env: dict[str, str], folder: Path, seconds: int, warm: Warm | None = None
) -> None:
    missing = [m for m in (block.note("needs") or "").split() if find_spec(m) is None]
    if missing:
        pytest.skip(f"{block.name}: needs {', '.join(missing)}")
    done = run(block, env, folder, seconds, warm)
    assert done.returncode == 0, (
        f"{block.name} failed (exit {done.returncode}):\n{block.code}\n"
        f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
    deprecated = [line for line in done.stderr.splitlines() if "is deprecated: pass" in line]
    assert not deprecated, f"{block.name} uses a deprecated spelling: {deprecated}"


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in CODE])
def test_block_parses(block: Block, tmp_path: Path) -> None:
    """Skipped blocks too: each is complete code of its language."""
    if block.language == "python":
        compile(block.code, block.name, "exec")
    else:
        done = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True)
        assert done.returncode == 0, f"{block.name}: {done.stderr}"


def test_every_block_says_what_it_is() -> None:
    """A block of our files is python, bash (run) or text (not code): none is left untagged,
    which would leave a command that nothing runs; every note belongs to a block of code."""
    untagged = [b.name for b in ALL if not b.language and b.file not in NOT_OURS]
    assert not untagged, f"tag these blocks python, bash or text: {untagged}"
    stray = [b.name for b in ALL if b.notes and b.language not in RUNNABLE]
    assert not stray, f"notes above blocks that are not code: {stray}"
    assert CODE and any(b.file == "README.md" for b in CODE)


def test_ci_runs_the_test_command_of_the_readme() -> None:
    """The README's contributor command installs what ``.ci/run`` installs and runs what it
    runs: ``.ci/run`` calls the test command written in README.md."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    command = re.search(r"^pip install (torch\S* -e '\.\[[^\]]*test[^\]]*\]') && (.*)$",
                        readme, re.MULTILINE)  # fmt: skip
    assert command, "README.md: no `pip install ... -e '.[test,...]' && TEST` line"
    install, test = command.groups()
    assert any(line.startswith("python3 -m pip install") and line.endswith(install) for line in ci)
    assert test in ci, f".ci/run does not run the README's test command {test!r}"
