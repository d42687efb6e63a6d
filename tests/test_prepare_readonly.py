"""A finished run on a read-only folder (a dataset published on a read-only share, issue 32):
running the same ``owt tokenize`` or ``owt merge --out`` again is "nothing to do", not a
failure to create the lock file. The finished state is seen before the lock is taken; a run
with something to write still takes it (and fails on a read-only folder, naming it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openwebtext import Corpus
from openwebtext.prepare import PrepareError, PrepareOptions, merge, prepare
from support import in_read_only_mount, lock_file_read_only

OPTIONS = PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.1)



def test_a_finished_run_on_a_read_only_folder_is_nothing_to_do(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Corpus.open(small_corpus)
    out = tmp_path / "out"
    done = prepare(corpus, out, OPTIONS)
    slices = [tmp_path / f"s{i}" for i in range(2)]
    for i, folder in enumerate(slices):
        prepare(corpus, folder, OPTIONS, shard=(i, 2))
    merged = merge(slices, tmp_path / "merged")
    lock_file_read_only(monkeypatch)
    again = prepare(corpus, out, OPTIONS)
    assert again.already and again.meta == done.meta
    assert prepare(corpus, slices[0], OPTIONS, shard=(0, 2)).already
    remerged = merge(slices, tmp_path / "merged")
    assert remerged.already and remerged.meta == merged.meta
    # Something to write: the lock is needed, and its failure is named.
    with pytest.raises(PrepareError, match=r"cannot lock .*Read-only file system"):
        prepare(corpus, out, OPTIONS, restart=True)
    with pytest.raises(PrepareError, match="cannot lock"):
        prepare(corpus, out, PrepareOptions(tokenizer="bytes", workers=0, val_fraction=0.2))



def test_owt_tokenize_and_merge_on_a_read_only_mount_say_nothing_to_do(
    small_corpus: Path, tmp_path: Path
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    probe = in_read_only_mount(tmp_path, ["sh", "-c", f"! touch {tmp_path}/probe"])
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mount here: {probe.stderr.strip()}")
    owt = [sys.executable, "-m", "openwebtext.cli"]
    tokenize = [*owt, "tokenize", str(small_corpus), "-j", "0", "--tokenizer", "bytes", "-q"]
    out, s0, s1 = tmp_path / "out", tmp_path / "s0", tmp_path / "s1"
    for args in ([], ["--shard", "0/2"], ["--shard", "1/2"]):
        folder = {0: out, 2: s0 if "0/2" in args else s1}[len(args)]
        subprocess.run([*tokenize, "--out", str(folder), *args], check=True, timeout=120)
    subprocess.run([*owt, "merge", str(s0), str(s1), "--out", str(tmp_path / "m"), "-q"],
                   check=True, timeout=120)  # fmt: skip
    before = sorted(p.name for p in tmp_path.rglob("*"))
    again = in_read_only_mount(tmp_path, [*tokenize, "--out", str(out)])
    assert again.returncode == 0, again.stderr
    remerge = [*owt, "merge", str(s0), str(s1), "--out", str(tmp_path / "m")]
    merged = in_read_only_mount(tmp_path, remerge)
    assert merged.returncode == 0, merged.stderr
    assert "nothing to do" in merged.stdout + merged.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
