"""``owt tokenize`` / ``owt merge`` (openwebtext.prepare): nanoGPT's exact files, resume, slices."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Options
from openwebtext.engine import nanogpt_text
from openwebtext.prepare import PrepareError, PrepareOptions, Progress, merge, prepare
from openwebtext.prepare.lock import LOCK
from openwebtext.prepare.workdir import PROGRESS
from openwebtext.synth import write_corpus
from openwebtext.tokenizer import load_tokenizer
from support import Owt, group_pids, inner_tar, outer_tar

# Documents whose text the loading script's rule changes; "" and whitespace-only ones too.
EDGE_DOCS = {
    "0000001-a.txt": "one\n\n\n\ntwo\n\n\nthree\n\nfour\n",
    "0000002-b.txt": "  \t leading and trailing whitespace \n\n",
    "0000003-c.txt": "",
    "0000004-d.txt": " \n\n\n\n \t\n",
    "0000005-e.txt": "\u3000ideographic space and em space\u2003\n\n\n\n\n\n",
    "0000006-f.txt": "keep\n\ntwo\r\n\r\n\r\nCRLF stays",
}


def _edge_corpus(folder: Path, small_corpus: Path) -> Path:
    """The small corpus plus a file of edge documents that sorts first by name."""
    folder.mkdir()
    for tar in sorted(small_corpus.glob("*.tar")):
        shutil.copy(tar, folder / tar.name)
    docs = {name: text.encode() for name, text in EDGE_DOCS.items()}
    outer_tar(folder / "aaa_edge.tar", [("aaa_edge-1_data.xz", lzma.compress(inner_tar(docs)))])
    return folder


def nanogpt_reference(tars: list[Path], test_size: float, seed: int) -> tuple[bytes, bytes]:
    """nanoGPT's prepare.py over the HF loading script, written out plainly: tarfile + lzma,
    default_rng(seed).permutation, encode_ordinary + eot, uint16."""
    enc = load_tokenizer("gpt2")
    docs: list[np.ndarray] = []
    for path in sorted(tars, key=lambda p: p.name):
        with tarfile.open(path) as outer:
            for member in outer:
                if not member.isreg():
                    continue
                raw = lzma.decompress(outer.extractfile(member).read())  # type: ignore[union-attr]
                with tarfile.open(fileobj=io.BytesIO(raw)) as inner:
                    for entry in inner:
                        if entry.isreg():
                            text = inner.extractfile(entry).read().decode("utf-8")  # type: ignore[union-attr]
                            text = re.sub("\n\n\n+", "\n\n", text).strip()
                            ids = [*enc.encode(text), 50256]
                            docs.append(np.array(ids, dtype=np.uint16))
    n = len(docs)
    n_val = math.ceil(test_size * n)
    perm = np.random.default_rng(seed).permutation(n)
    val = b"".join(docs[i].tobytes() for i in perm[:n_val])
    train = b"".join(docs[i].tobytes() for i in perm[n_val:])
    return train, val


def _bins(folder: Path) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in ("train.bin", "val.bin", "meta.json")}


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_nanogpt_text_rule() -> None:
    assert nanogpt_text(EDGE_DOCS["0000001-a.txt"]) == "one\n\ntwo\n\nthree\n\nfour"
    assert nanogpt_text(EDGE_DOCS["0000002-b.txt"]) == "leading and trailing whitespace"
    assert nanogpt_text("") == ""
    assert nanogpt_text(EDGE_DOCS["0000004-d.txt"]) == ""
    # str.strip() strips Unicode whitespace, as the loading script's does.
    assert nanogpt_text(EDGE_DOCS["0000005-e.txt"]) == "ideographic space and em space"
    assert nanogpt_text(EDGE_DOCS["0000006-f.txt"]) == "keep\n\ntwo\r\n\r\n\r\nCRLF stays"


@pytest.mark.parametrize("val_fraction", ["0.0005", "0.1"])
def test_nanogpt_split_is_byte_identical_to_a_plain_reimplementation(
    owt: Owt, small_corpus: Path, tmp_path: Path, val_fraction: str
) -> None:
    corpus = _edge_corpus(tmp_path / "corpus", small_corpus)
    tars = sorted(corpus.glob("*.tar"), reverse=True)  # given out of order: sorted by name
    out = tmp_path / "out"
    result = owt("tokenize", *map(str, tars), "--out", str(out), "--split", "nanogpt",
                 "--val-fraction", val_fraction, "-j", "2", "-q")  # fmt: skip
    assert result.returncode == 0, result.stderr
    train, val = nanogpt_reference(tars, float(val_fraction), 2357)
    assert (out / "val.bin").read_bytes() == val
    assert (out / "train.bin").read_bytes() == train
    ids = np.concatenate([np.frombuffer(train, np.uint16), np.frombuffer(val, np.uint16)])
    n = 120 + len(EDGE_DOCS)
    assert int((ids == 50256).sum()) == n  # the empty documents still get their end-of-text
    meta = json.loads((out / "meta.json").read_text())
    n_val = math.ceil(float(val_fraction) * n)
    assert meta["counts"]["documents"] == {"train": n - n_val, "val": n_val}
    assert meta["config"]["split_rule"] == "nanogpt"
    assert _hidden(out) == []


def test_empty_documents_become_a_lone_end_of_text(tmp_path: Path) -> None:
    docs = {"0-x.txt": b"", "1-y.txt": b" \n\n\n\n ", "2-z.txt": b"a\n\n\n\nb"}
    outer = outer_tar(tmp_path / "e.tar", [("e-1_data.xz", lzma.compress(inner_tar(docs)))])
    report = prepare(Corpus.open(outer), tmp_path / "out", _opts("nanogpt", val_fraction=0.3),
                     shard=(0, 1), checkpoint_seconds=0)  # fmt: skip
    # shard 0/1 is still a slice: its tokens.bin is in corpus order.
    ids = np.fromfile(tmp_path / "out" / "tokens.bin", dtype=np.uint16).tolist()
    a, b = load_tokenizer("gpt2").encode("a\n\nb"), 50256
    assert ids == [b, b, *a, b]
    assert np.fromfile(tmp_path / "out" / "lengths.bin", dtype="<i8").tolist() == [1, 1, len(a) + 1]
    assert report.meta["counts"]["documents"] == {"all": 3}


def _opts(split: str, **overrides: object) -> PrepareOptions:
    base: dict[str, object] = {"split_rule": split, "tokenizer": "gpt2", "workers": 0}
    return PrepareOptions(**{**base, **overrides})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def runs(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One uninterrupted library run per split rule (val_fraction 0.1: several val docs)."""
    out = {}
    for split in ("hash", "nanogpt"):
        folder = tmp_path_factory.mktemp(f"whole-{split}")
        prepare(Corpus.open(small_corpus), folder, _opts(split, val_fraction=0.1, workers=2))
        out[split] = folder
    return out


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_meta_json_records_each_file_and_sha256(runs: dict[str, Path], split: str) -> None:
    meta = json.loads((runs[split] / "meta.json").read_text())
    for name in ("train.bin", "val.bin"):
        data = (runs[split] / name).read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        assert meta["files"][name] == {"bytes": len(data), "sha256": sha256}
    assert sorted(p.name for p in runs[split].iterdir()) == ["meta.json", "train.bin", "val.bin"]


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_shards_merge_into_the_files_of_one_run(
    small_corpus: Path, tmp_path: Path, runs: dict[str, Path], split: str
) -> None:
    corpus = Corpus.open(small_corpus)
    slices = []
    for i in range(4):  # 6 units in 4 slices: sizes 1, 2, 1, 2
        prepare(corpus, tmp_path / f"s{i}", _opts(split, val_fraction=0.1), shard=(i, 4))
        slices.append(tmp_path / f"s{i}")
    report = merge([slices[2], slices[0], slices[3], slices[1]], tmp_path / "merged")
    assert _bins(tmp_path / "merged") == _bins(runs[split])  # meta.json included
    assert report.meta == json.loads((runs[split] / "meta.json").read_text())
    assert _hidden(tmp_path / "merged") == []


def test_merge_refuses_missing_duplicated_and_foreign_slices(
    owt: Owt, small_corpus: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open(small_corpus)
    for i in range(3):
        prepare(corpus, tmp_path / f"s{i}", _opts("nanogpt"), shard=(i, 3))
    s0, s1, s2 = (tmp_path / f"s{i}" for i in range(3))
    with pytest.raises(PrepareError, match=r"missing.*shard 1/3"):
        merge([s0, s2], tmp_path / "m")
    with pytest.raises(PrepareError, match=r"missing.*shard 2/3"):
        merge([s0, s1], tmp_path / "m")
    shutil.copytree(s1, tmp_path / "again")
    with pytest.raises(PrepareError, match="shard 1/3 is given twice"):
        merge([s0, s1, tmp_path / "again", s2], tmp_path / "m")
    prepare(corpus, tmp_path / "other", _opts("nanogpt", val_seed=7), shard=(1, 3))
    with pytest.raises(PrepareError, match=r"different options: val_seed 7"):
        merge([s0, tmp_path / "other", s2], tmp_path / "m")
    prepare(corpus, tmp_path / "hashed", _opts("hash"), shard=(1, 3))
    with pytest.raises(PrepareError, match=r"different options: split_rule 'hash'"):
        merge([s0, tmp_path / "hashed", s2], tmp_path / "m")
    one = Corpus.open(sorted(small_corpus.glob("*.tar"))[:1])
    prepare(one, tmp_path / "foreign", _opts("nanogpt"), shard=(1, 3))
    with pytest.raises(PrepareError, match="different corpus"):
        merge([s0, tmp_path / "foreign", s2], tmp_path / "m")
    with pytest.raises(PrepareError, match="not a slice"):
        merge([s0, tmp_path / "nothing"], tmp_path / "m")
    result = owt("merge", str(s0), str(s2), "--out", str(tmp_path / "m"), "-q")
    assert result.returncode == 1 and "missing" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "m" / "train.bin").exists()


class _Stop(KeyboardInterrupt):
    pass


def _stop_after(count: int, phase: str) -> Callable[[Progress], None]:
    seen = {"n": 0}

    def progress(event: Progress) -> None:
        if event.phase == phase:
            seen["n"] += 1
            if seen["n"] == count:
                raise _Stop

    return progress


@pytest.mark.parametrize(
    ("split", "phase", "cut"),
    [("hash", "tokenize", 1), ("hash", "tokenize", 4), ("nanogpt", "tokenize", 3),
     ("nanogpt", "permute", 1)],
)  # fmt: skip
def test_interrupted_run_goes_on_to_the_same_files(
    small_corpus: Path, tmp_path: Path, runs: dict[str, Path], split: str, phase: str, cut: int
) -> None:
    corpus = Corpus.open(small_corpus)
    options = _opts(split, val_fraction=0.1, workers=2)
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path, options, progress=_stop_after(cut, phase), checkpoint_seconds=0)
    record = json.loads((tmp_path / PROGRESS).read_text())
    assert record["phase"] == phase
    if phase == "tokenize":
        assert record["position"] == cut  # every finished unit is kept
    assert not (tmp_path / "train.bin").exists()
    # interrupted again: a resumed run is itself resumable
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path, options, progress=_stop_after(1, phase), checkpoint_seconds=0)
    if phase == "tokenize":
        assert json.loads((tmp_path / PROGRESS).read_text())["position"] == cut + 1
    report = prepare(corpus, tmp_path, options)
    assert report.resumed
    assert _bins(tmp_path) == _bins(runs[split])
    assert _hidden(tmp_path) == []


def test_progress_of_other_options_or_corpus_is_refused(
    owt: Owt, small_corpus: Path, tmp_path: Path
) -> None:
    corpus = Corpus.open(small_corpus)
    with pytest.raises(_Stop):
        prepare(corpus, tmp_path, _opts("hash"), progress=_stop_after(2, "tokenize"),
                checkpoint_seconds=0)  # fmt: skip
    with pytest.raises(PrepareError, match=r"options: val_seed 2357 \(now: 1\).*--restart"):
        prepare(corpus, tmp_path, _opts("hash", val_seed=1))
    with pytest.raises(PrepareError, match="different options: split_rule 'hash'"):
        prepare(corpus, tmp_path, _opts("nanogpt"))
    one = Corpus.open(sorted(small_corpus.glob("*.tar"))[:1])
    with pytest.raises(PrepareError, match="a different corpus"):
        prepare(one, tmp_path, _opts("hash"))
    result = owt("tokenize", str(sorted(small_corpus.glob("*.tar"))[0]), "--out", str(tmp_path),
                 "--tokenizer", "gpt2", "-q")  # fmt: skip
    assert result.returncode == 1 and "different corpus" in result.stderr, result.stderr
    report = prepare(corpus, tmp_path, _opts("hash", val_seed=1), restart=True)
    assert not report.resumed and report.meta["config"]["val_seed"] == 1
    assert _hidden(tmp_path) == []


def test_a_finished_folder_is_not_written_again(small_corpus: Path, runs: dict[str, Path]) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in runs["hash"].iterdir()}
    report = prepare(Corpus.open(small_corpus), runs["hash"], _opts("hash", val_fraction=0.1))
    assert report.already
    assert {p.name: p.stat().st_mtime_ns for p in runs["hash"].iterdir()} == before


def test_a_commit_cut_short_is_finished_by_the_next_run(
    small_corpus: Path, tmp_path: Path, runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = Corpus.open(small_corpus)
    options = _opts("hash", val_fraction=0.1)
    (tmp_path / "meta.json").write_text("{}")  # an older run's
    real = os.replace

    def replace(src: os.PathLike[str], dst: os.PathLike[str]) -> None:
        if str(dst).endswith("val.bin"):
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr("openwebtext.prepare.workdir.os.replace", replace)
    with pytest.raises(PrepareError, match="No space"):  # (naming the folder: session 29)
        prepare(corpus, tmp_path, options)
    # train.bin is renamed, val.bin is not: no meta.json may describe them now.
    assert (tmp_path / "train.bin").exists() and not (tmp_path / "meta.json").exists()
    monkeypatch.setattr("openwebtext.prepare.workdir.os.replace", real)
    prepare(corpus, tmp_path, options)
    assert _bins(tmp_path) == _bins(runs["hash"])
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_files_get_ordinary_permissions(small_corpus: Path, tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        prepare(Corpus.open(small_corpus), tmp_path, _opts("hash", tokenizer="bytes"))
    finally:
        os.umask(old)
    for name in ("train.bin", "val.bin", "meta.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


@pytest.fixture(scope="module")
def slow_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough members (16 x 40 documents) that a run can be caught in the middle."""
    out = tmp_path_factory.mktemp("slow") / "corpus"
    write_corpus(out, subsets=2, members=8, docs=40, seed=3, workers=2)
    return out


@pytest.fixture(scope="module")
def slow_runs(slow_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Uninterrupted runs over ``slow_corpus`` with the options of ``_tokenize_cmd``."""
    out = {}
    for split in ("hash", "nanogpt"):
        out[split] = tmp_path_factory.mktemp(f"slow-{split}")
        prepare(Corpus.open(slow_corpus), out[split], _opts(split, val_fraction=0.05, workers=2))
    return out


def _tokenize_cmd(corpus: Path, out: Path, split: str) -> list[str]:
    return [sys.executable, "-m", "openwebtext.cli", "tokenize", str(corpus), "--out", str(out),
            "--split", split, "--val-fraction", "0.05", "-j", "1", "-q",
            "--checkpoint-seconds", "0"]  # fmt: skip


def _start_and_catch(cmd: list[str], out: Path) -> subprocess.Popen[bytes] | None:
    """Start ``cmd`` in its own session (SIGINT at its default) and return it once its first
    progress record is on disk; None if it finished first."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            record = json.loads((out / PROGRESS).read_text())
        except (OSError, ValueError):
            time.sleep(0.002)
            continue
        if record["phase"] == "tokenize" and record["position"] >= 1:
            return proc
    proc.communicate(timeout=30)
    return None


@pytest.mark.parametrize(
    ("split", "how", "code"),
    [("nanogpt", signal.SIGKILL, -9), ("hash", signal.SIGKILL, -9),
     ("hash", signal.SIGINT, 130), ("nanogpt", signal.SIGTERM, 143)],
)  # fmt: skip
def test_killed_run_goes_on_when_run_again(
    owt: Owt,
    slow_corpus: Path,
    slow_runs: dict[str, Path],
    tmp_path: Path,
    split: str,
    how: int,
    code: int,
) -> None:
    whole = slow_runs[split]
    for attempt in range(5):
        out = tmp_path / f"out{attempt}"
        proc = _start_and_catch(_tokenize_cmd(slow_corpus, out, split), out)
        if proc is not None:
            break
    else:
        pytest.fail("every run finished before it could be interrupted")
    os.killpg(proc.pid, how)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err.decode()
    deadline = time.monotonic() + 10  # killed processes may take a moment to be reaped
    while group_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_pids(proc.pid) == []  # no worker left behind
    record = json.loads((out / PROGRESS).read_text())
    assert record["position"] >= 1
    assert not (out / "meta.json").exists()
    if how != signal.SIGKILL:
        assert "Traceback" not in err.decode()
    leftovers = set(_hidden(out))
    again = owt(*_tokenize_cmd(slow_corpus, out, split)[3:])
    assert again.returncode == 0, again.stderr
    assert "resumed" in again.stderr
    assert _bins(out) == _bins(whole)
    assert _hidden(out) == []
    # a killed run leaves only fixed names: the progress record, the parts, the lock file
    allowed = {PROGRESS, ".train.bin.part", ".val.bin.part", ".tokens.bin.part",
               ".lengths.bin.part", f".{PROGRESS[1:]}.part", LOCK}  # fmt: skip
    assert leftovers <= allowed, leftovers


@pytest.mark.parametrize("split", ["hash", "nanogpt"])
def test_a_corrupt_member_is_named_or_skipped_and_counted(
    owt: Owt, tmp_path: Path, split: str
) -> None:
    good = {f"{k}-g.txt": f"good document {k}\n".encode() for k in range(3)}
    members = [(f"m{i}_data.xz", lzma.compress(inner_tar(good if i != 1 else {"x.txt": b"x"})))
               for i in range(3)]  # fmt: skip
    bad = bytearray(members[1][1])
    bad[len(bad) // 2 : len(bad) // 2 + 8] = b"\x00\xff" * 4
    members[1] = (members[1][0], bytes(bad))
    outer = outer_tar(tmp_path / "c.tar", members)
    result = owt("tokenize", str(outer), "--out", str(tmp_path / "a"), "--split", split, "-q")
    assert result.returncode == 1
    assert "c.tar[m1_data.xz]" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "a" / "train.bin").exists()
    result = owt("tokenize", str(outer), "--out", str(tmp_path / "b"), "--split", split, "-q",
                 "--on-error", "skip")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "skipped 0 files (not read at all), 1 member," in result.stderr, result.stderr
    assert "m1_data.xz" in result.stderr
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    counts = meta["counts"]
    assert counts["skipped_members"] == 1 and sum(counts["documents"].values()) == 6


def test_progress_bar_shows_tokens_per_second_and_time_left(
    owt: Owt, small_corpus: Path, tmp_path: Path
) -> None:
    result = owt("tokenize", str(small_corpus), "--out", str(tmp_path), "--split", "nanogpt")
    assert result.returncode == 0, result.stderr
    bar = [line for line in re.split(r"[\r\n]", result.stderr) if line.startswith("tokenize")][-1]
    assert "100%" in bar and "M tokens/s" in bar
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", bar), bar  # elapsed<time left


def test_a_member_cut_short_keeps_its_documents_before_the_cut_under_skip(
    owt: Owt,
    tmp_path: Path,
) -> None:
    first = {f"{k}-a.txt": f"first member {k}\n".encode() for k in range(3)}
    second = {f"{k}-b.txt": os.urandom(600).hex().encode() for k in range(40)}  # incompressible
    members = [("a_data.xz", lzma.compress(inner_tar(first))),
               ("b_data.xz", lzma.compress(inner_tar(second)))]  # fmt: skip
    outer = outer_tar(tmp_path / "cut.tar", members)
    with tarfile.open(outer) as tar:
        info = tar.getmember("b_data.xz")
    os.truncate(outer, info.offset_data + info.size // 2)  # an interrupted download
    result = owt("tokenize", str(outer), "--out", str(tmp_path / "a"), "--tokenizer", "bytes",
                 "-q")  # fmt: skip
    assert result.returncode == 1 and "cut.tar[b_data.xz]" in result.stderr
    result = owt("tokenize", str(outer), "--out", str(tmp_path / "b"), "--tokenizer", "bytes",
                 "--on-error", "skip", "-q")  # fmt: skip
    assert result.returncode == 0, result.stderr
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert meta["counts"]["partial_members"] == 1 and meta["counts"]["skipped_members"] == 0
    assert 3 < sum(meta["counts"]["documents"].values()) < 43


@pytest.mark.parametrize(
    "options",
    [
        {"seed": -1},
        {"seed": True},
        {"workers": -1},
        {"val_fraction": True},
        {"val_fraction": 0},
        {"val_fraction": float("nan")},
        {"val_seed": 2**64},
        {"val_seed": -1},
        {"take": -1},
        {"on_error": "ignore"},
        {"max_errors": -1},
        {"max_errors": False},
        {"shuffle": 1},  # (session 28: PrepareOptions took it, wrote "shuffle": 1, and
        {"shuffle": "no"},  # refused its own meta.json; "no" shuffled)
    ],
)
def test_prepare_options_and_loader_options_refuse_the_same_values(
    options: dict[str, object],
) -> None:
    """One rule per shared option (``options.check_*``), the same message from both."""
    with pytest.raises(ValueError, match=next(iter(options))) as loader:
        Options(**options)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=next(iter(options))) as prepare_:
        PrepareOptions(**options)  # type: ignore[arg-type]
    assert str(loader.value) == str(prepare_.value)


def test_prepare_and_merge_refuse_arguments_they_would_misread(
    small_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Red team, session 28: ``prepare(corpus, "")`` wrote its files into the working folder;
    a tokenizer of None, a path for the corpus, a dict of options failed deep inside; ``merge``
    of one path read its characters as folders; ``max_errors=-1`` was a ``TooManyErrors``."""
    from openwebtext.prepare import slice_folders

    monkeypatch.chdir(tmp_path)
    corpus = Corpus.open(small_corpus)
    with pytest.raises(ValueError, match="out must name a folder or a URL, not ''"):
        prepare(corpus, "")
    with pytest.raises(ValueError, match="out must name a folder or a URL, not ' '"):
        prepare(corpus, " ")
    with pytest.raises(ValueError, match="tokenizer must be a tokenizer spec"):
        PrepareOptions(tokenizer=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"corpus must be a Corpus \(Corpus.open\(paths\)\)"):
        prepare(str(small_corpus), "o")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="options must be a PrepareOptions, not dict"):
        prepare(corpus, "o", {"workers": 0})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="folders must be a list of the slices' folders"):
        merge("s0", "o")
    with pytest.raises(ValueError, match="max_errors must be None or >= 0, not -1"):
        merge(["s0"], "o", max_errors=-1)
    with pytest.raises(ValueError, match="a slice's folder must name a folder or a URL"):
        merge([""], "o")
    with pytest.raises(ValueError, match="count must be an int >= 1, not -1"):
        slice_folders("o", ".s", -1)
    with pytest.raises(ValueError, match=r"under must be a folder inside out, not '\.\./x'"):
        slice_folders("o", "../x", 2)
    assert not list(tmp_path.iterdir())
