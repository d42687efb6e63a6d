"""What a red team of session 37 found in a host process's own settings.

- A host that ignores SIGCHLD (``SIG_IGN``; inherited through ``exec`` by ``owt``): the kernel
  reaps its children, ``multiprocessing`` took every worker alive for ever, and every run with
  workers failed at its end with a bare ``ValueError`` (``owt tokenize`` never finished). The
  library now says it at once; ``owt`` waits for its own children.
- A host that makes ``EncodingWarning`` an error (PEP 597: ``-X warn_default_encoding``, ``-W
  error``): the library's own text ``open()`` without ``encoding=`` (``files.umask``'s read of
  ``/proc/self/status``, on every file written; a ``Corpus``'s pickling) failed after the work
  was done.
- An interrupt between a descriptor's opening and its check (``codec.open_regular``) left it
  open; one as ``write_corpus`` made its folder private left the ``.partial`` folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from openwebtext import codec
from openwebtext.synth import pack, write_corpus

_IGNORED = """
import ctypes, signal, sys
if sys.argv[2] == "python":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
else:  # past Python's view, as Ray's core worker sets it
    libc = ctypes.CDLL(None)
    libc.signal.restype, libc.signal.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p]
    libc.signal(signal.SIGCHLD, 1)  # SIG_IGN
    assert signal.getsignal(signal.SIGCHLD) != signal.SIG_IGN
from openwebtext import Loader, OWTError
try:
    with Loader(sys.argv[1], workers=2).iter() as docs:
        print("read", sum(1 for _ in docs))
except OWTError as exc:
    print("refused:", exc)
"""


@pytest.mark.parametrize("where", ["python", "c"])
def test_a_host_that_ignores_sigchld_is_told_at_once(
    small_corpus: Path, tmp_path: Path, where: str
) -> None:
    """Ignored in Python, or in C (read from the kernel: Python's view says the default)."""
    script = tmp_path / "ignored.py"
    script.write_text(_IGNORED)
    done = subprocess.run([sys.executable, str(script), str(small_corpus), where],
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert done.stdout.startswith("refused: this process ignores SIGCHLD"), done.stdout
    assert "Traceback" not in done.stderr


def test_owt_waits_for_its_children_whatever_its_parent_ignored(
    small_corpus: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tokens"
    done = subprocess.run(
        [sys.executable, "-m", "openwebtext_cli", "tokenize", str(small_corpus), "--out",
         str(out), "--tokenizer", "bytes", "-j", "2", "-q"],
        preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN),  # (kept by exec)
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "train.bin", "val.bin"]


_STRICT = """
import pickle, sys
from openwebtext import Corpus, Loader
from openwebtext.prepare import PrepareOptions, prepare
from openwebtext.synth import write_corpus

corpus, out = sys.argv[1], sys.argv[2]
write_corpus(out + "/synth", subsets=1, members=2, docs=5, seed=0, workers=1)
prepare(Corpus.open(corpus), out + "/prepared", PrepareOptions(tokenizer="bytes"))
pickle.dumps(Corpus.open(corpus)), pickle.dumps(Loader(corpus))
with Loader(corpus, workers=2).iter() as docs:
    print(sum(1 for _ in docs), len(str(docs.state_dict())) > 0)
"""


def test_a_host_that_makes_encoding_warnings_errors(small_corpus: Path, tmp_path: Path) -> None:
    script = tmp_path / "strict.py"
    script.write_text(_STRICT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-X", "warn_default_encoding", "-W", "error::EncodingWarning",
         str(script), str(small_corpus), str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout.split()) == (0, ["120", "True"]), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared", "strict.py", "synth"]


class _Interrupt(BaseException):
    """A host's signal handler's exception, raised on our thread."""


def test_an_interrupt_as_a_descriptor_is_checked_closes_it(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(fd: int) -> os.stat_result:
        raise _Interrupt

    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(codec.os, "fstat", interrupted)
    with pytest.raises(_Interrupt):
        codec.open_regular(next(small_corpus.iterdir()))
    monkeypatch.undo()
    assert len(os.listdir("/proc/self/fd")) == before


def test_an_interrupt_as_a_corpus_s_folder_is_made_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(path: Path, mode: int) -> None:
        raise _Interrupt

    monkeypatch.setattr(pack.Path, "chmod", interrupted)
    with pytest.raises(_Interrupt):
        write_corpus(tmp_path / "c", subsets=1, members=1, docs=2, seed=0, workers=1)
    assert list(tmp_path.iterdir()) == []

