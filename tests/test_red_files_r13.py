"""Files changing under a format pass (session 36): ``write_format`` read ``train.bin``
through a memory map, so a file cut by another program meanwhile killed the process with
SIGBUS (no error, the folder's lock and temporary files left). It reads the file now, and says
the cut, naming the file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, prepare, write_format

_CUT = """
import os, sys
from pathlib import Path
from openwebtext.prepare import convert, write_format
folder, where = Path(sys.argv[1]), sys.argv[2]
real = getattr(convert, where)

def cut_first(*args, **kwargs):  # another program cuts train.bin to a tenth meanwhile
    path = folder / "train.bin"
    os.truncate(path, path.stat().st_size // 10)
    return real(*args, **kwargs)

setattr(convert, where, cut_first)
try:
    write_format(folder, "llmc", shard_tokens=2_000)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


@pytest.fixture(scope="module")
def finished(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    prepare(Corpus.open(small_corpus), out, PrepareOptions(tokenizer="bytes", workers=0))
    return out


@pytest.mark.parametrize("where", ["eot_ends", "_write"])
def test_a_train_bin_cut_during_a_format_pass_is_said(
    finished: Path, tmp_path: Path, where: str
) -> None:
    """Cut while its end-of-text ids are scanned, or while an llm.c shard is copied from it."""
    folder = Path(shutil.copytree(finished, tmp_path / "run"))
    script = tmp_path / "cut.py"
    script.write_text(textwrap.dedent(_CUT))
    done = subprocess.run([sys.executable, str(script), str(folder), where], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "train.bin" in done.stdout and "cut while it was read" in done.stdout, done.stdout
    assert not (folder / "llmc.json").exists()


def test_a_train_bin_of_another_size_than_its_meta_is_said(finished: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(finished, tmp_path / "run"))
    with open(folder / "train.bin", "ab") as f:
        f.write(b"\0\1")
    with pytest.raises(PrepareError, match=r"train.bin: \d+ bytes, not the \d+ its meta.json"):
        write_format(folder, "megatron")
