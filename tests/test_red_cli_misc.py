"""Red team, commands and the reference API: `owt index` counting a split it lacks, the
reference API taking one path and numpy's integers, `owt bench`'s and `owt synth`'s flags
refused as the other commands refuse them, and one-line errors (a file where a folder must
be made, an unknown tiktoken encoding)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from openwebtext import (
    Corpus,
    Loader,
    OpenWebTextLoader,
    Options,
    TokenizerError,
    load_tokenizer,
    shuffle,
    take,
)
from openwebtext.stream.counts import count_documents
from openwebtext.synth import write_corpus
from support import Owt


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("owt: error: ") and "Traceback" not in stderr
    return lines[0]


# -- 5: owt index counts the held-out splits it does not have yet -----------------------------


def test_index_counts_a_split_missing_from_an_indexed_corpus(
    owt: Owt, small_corpus: Path, tmp_path: Path
) -> None:
    path = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    assert owt("index", str(path), "-q", "-j", "0").returncode == 0
    ran = owt("index", str(path), "-q", "-j", "0", "--val-fraction", "0.1")
    assert ran.returncode == 0
    assert "already indexed" not in ran.stderr
    assert "--val-fraction 0.1 --val-seed 2357: counting now" in ran.stderr
    (counts,) = path.glob(".owt-counts-*.json")
    assert set(json.loads(counts.read_text())["val"]) == {"0.0005/2357", "0.1/2357"}
    found = Corpus.open(path).counts
    assert found is not None and found.per_unit("val", 0.1, 2357) is not None
    # Everything asked is there now: said, nothing counted.
    ran = owt("index", str(path), "-q", "-j", "0", "--val-fraction", "0.1",
              "--val-fraction", "0.0005")  # fmt: skip
    assert ran.returncode == 0 and ran.stderr.startswith("already indexed: 120 documents")


def test_stream_after_index_of_a_split_counts_nothing(
    owt: Owt, small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    assert owt("index", str(path), "-q", "-j", "0").returncode == 0
    assert owt("index", str(path), "-q", "-j", "0", "--val-fraction", "0.25").returncode == 0
    caplog.clear()
    ran = owt("stream", str(path), "-q", "-j", "0", "--world-size", "2", "--split", "val",
              "--val-fraction", "0.25")  # fmt: skip
    assert ran.returncode == 0
    assert "counting the documents" not in caplog.text + ran.stderr


def test_a_stream_counting_a_split_on_first_use_keeps_the_splits_indexed(
    small_corpus: Path, tmp_path: Path
) -> None:
    """A stream of a split the counts lacked counted it (and nanoGPT's again) and saved only
    those: the split ``owt index --val-fraction 0.1`` had counted was dropped from the file."""
    path = Path(shutil.copytree(small_corpus, tmp_path / "c"))
    corpus = Corpus.open(path)
    corpus.save_counts(count_documents(corpus, workers=0, splits=((0.1, 2357),)))
    with Loader(path, workers=0, world_size=2, split="val", val_fraction=0.25).iter() as it:
        next(it)
    (counts,) = path.glob(".owt-counts-*.json")
    assert set(json.loads(counts.read_text())["val"]) == {"0.1/2357", "0.25/2357", "0.0005/2357"}


# -- 6, 7: the reference API takes one path, and numpy's integers ------------------------------


@pytest.mark.parametrize("kind", [str, Path])
def test_reference_loader_takes_one_path(small_corpus: Path, kind: type) -> None:
    assert sum(1 for _ in OpenWebTextLoader(kind(small_corpus), 0)) == 120
    one = small_corpus / "urlsf_subset00.tar"
    assert sum(1 for _ in OpenWebTextLoader(kind(one), 0)) == 60


def test_reference_api_takes_numpy_integers(small_corpus: Path) -> None:
    assert list(take(range(10), np.int64(3))) == [0, 1, 2]
    assert list(take(range(10), np.uint8(2))) == [0, 1]
    assert sorted(shuffle(iter(range(10)), np.int64(4))) == list(range(10))
    assert len(list(shuffle(iter(range(10)), np.prod([2, 2])))) == 10
    assert list(shuffle(range(5), 2, np.int64(7))) == list(shuffle(range(5), 2, 7))
    loader = OpenWebTextLoader([small_corpus], num_workers=np.int64(0), random_state=np.int64(1))
    assert type(loader.num_workers) is int and loader.options.workers == 0
    assert sum(1 for _ in loader) == 120
    # Bools stay refused (an int subclass, never a count).
    with pytest.raises(ValueError, match="size must be"):
        take(range(3), True)
    with pytest.raises(ValueError, match="buffer_size must be"):
        shuffle(range(3), np.bool_(True))
    with pytest.raises(ValueError, match="workers must be"):
        Options(workers=True)
    with pytest.raises(ValueError, match="take must be"):
        Options(take=np.float64(3.0))


def test_options_hold_python_ints_whatever_integral_they_were_given(small_corpus: Path) -> None:
    options = Options(workers=np.int64(0), seed=np.uint16(3), take=np.int32(5), epochs=np.int8(1),
                      world_size=np.int64(1), rank=np.int64(0), max_errors=np.int64(2))  # fmt: skip
    for name in ("workers", "seed", "take", "epochs", "world_size", "rank", "max_errors"):
        assert type(getattr(options, name)) is int, name
    run = Loader(small_corpus, options=options).iter()
    assert len(list(run)) == 5
    state = run.state_dict()
    json.dumps(state)  # Python ints only
    assert state["config"]["seed"] == 3 and type(state["config"]["seed"]) is int


# -- 8: owt bench's flags are checked as owt stream's -----------------------------------------


def test_bench_refuses_a_negative_seed_and_an_empty_command(
    owt: Owt, small_corpus: Path, tmp_path: Path
) -> None:
    base = ("bench", str(small_corpus), "-q", "--workers", "1", "--repeat", "1", "--warmup", "0",
            "--out", str(tmp_path / "o"))  # fmt: skip
    ran = owt(*base, "--seed", "-1")
    assert ran.returncode == 2 and "argument --seed: seed must be an int >= 0" in ran.stderr
    assert "Traceback" not in ran.stderr
    ran = owt(*base, "--vs", " ")
    assert ran.returncode == 2 and "argument --vs: an empty command" in ran.stderr
    assert not (tmp_path / "o").exists()


# -- 10: a file where a folder must be made is said in one line naming it ---------------------


def test_bench_out_onto_a_file_is_one_line(owt: Owt, small_corpus: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    ran = owt("bench", str(small_corpus), "-q", "--workers", "1", "--repeat", "1",
              "--warmup", "0", "--out", str(tmp_path / "afile"))  # fmt: skip
    assert ran.returncode == 1
    line = _one_error_line(ran.stderr)
    assert f"--out {tmp_path / 'afile'} is not a folder" in line and "Errno" not in line


def test_cache_dir_onto_a_file_is_one_line(
    owt: Owt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("OWT_CACHE_DIR", str(tmp_path / "afile"))
    ran = owt("stream", "-q", "--take", "1")
    assert ran.returncode == 1
    line = _one_error_line(ran.stderr)
    assert f"the cache folder {tmp_path / 'afile'} ($OWT_CACHE_DIR" in line
    assert "is not a folder" in line and "Errno" not in line


# -- 11: an unknown tiktoken encoding is one line ---------------------------------------------


def test_unknown_tiktoken_encoding_is_one_line(owt: Owt, small_corpus: Path) -> None:
    pytest.importorskip("tiktoken")
    with pytest.raises(TokenizerError) as caught:
        load_tokenizer("tiktoken:nonexist")
    assert "\n" not in str(caught.value)
    assert "tiktoken has no encoding 'nonexist'" in str(caught.value)
    ran = owt("stream", str(small_corpus), "-q", "-j", "0", "--tokenizer", "tiktoken:nonexist")
    assert ran.returncode != 0
    assert "tiktoken has no encoding 'nonexist'" in _one_error_line(ran.stderr)


# -- 13: owt synth's -j and --where's flags ---------------------------------------------------


@pytest.mark.parametrize("jobs", ["0", "-5"])
def test_synth_refuses_no_processes(owt: Owt, tmp_path: Path, jobs: str) -> None:
    ran = owt("synth", str(tmp_path / "c"), "--subsets", "1", "--members", "1", "--docs", "2",
              "-q", "-j", jobs)  # fmt: skip
    assert ran.returncode == 2 and "argument -j/--jobs: must be >= 1" in ran.stderr
    assert not (tmp_path / "c").exists()
    with pytest.raises(ValueError, match="workers must be >= 1"):
        write_corpus(tmp_path / "d", subsets=1, members=1, docs=2, seed=0, workers=int(jobs))


def test_synth_where_refuses_the_flags_of_a_corpus_written(owt: Owt, tmp_path: Path) -> None:
    ran = owt("synth", "--where", "--subsets", "2", "--members", "7")
    assert ran.returncode == 2 and ran.stdout == ""
    assert "give it no --subsets, --members" in _one_error_line(ran.stderr)
    assert owt("synth", "--where", "-j", "2").returncode == 2
    # A flag not given still has its default.
    ran = owt("synth", str(tmp_path / "c"), "--members", "1", "--docs", "2", "-q", "-j", "1")
    assert ran.returncode == 0 and "in 3 subsets x 1 member to" in ran.stderr
