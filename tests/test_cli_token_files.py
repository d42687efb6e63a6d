"""``owt stream`` reads files of token ids (``owt tokenize``'s, Megatron's, llm.c's,
datatrove's) as the library does (``Corpus.open_tokens``): their documents and ids counted,
packed into the same batches, saved and resumed, and as a part of a mixture; a run that
cannot read them (no tokenizer, ``--jsonl``, token files beside a text corpus) is refused
before any document is read."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from openwebtext import Loader, Mixture, Options
from openwebtext.cli.args import token_files
from openwebtext.cli.command import as_flags
from openwebtext.index import Corpus
from support import Owt


def _meta_counts(run: Path) -> tuple[int, int]:
    counts = json.loads((run / "meta.json").read_text())["counts"]
    return counts["documents"]["train"], counts["tokens"]["train"]


@pytest.mark.parametrize("name", ["train.bin", "train.ds", "train_000000.bin"])
def test_owt_stream_counts_the_documents_and_ids_of_token_files(
    owt: Owt, token_run: Path, name: str
) -> None:
    files = sorted(token_run.glob("train_*.bin")) if name.startswith("train_") else [
        token_run / name]  # fmt: skip
    ran = owt("stream", *map(str, files), "--tokenizer", "bytes", "-q", "-j", "1")
    assert ran.returncode == 0, ran.stderr
    documents, tokens = _meta_counts(token_run)
    assert f"{documents:,} documents, {tokens:,} ids, " in ran.stderr
    assert "MB of ids" in ran.stderr


def test_owt_stream_packs_token_files_into_the_library_s_batches_and_resumes(
    owt: Owt, token_run: Path, tmp_path: Path
) -> None:
    path = str(token_run / "train.bin")
    options = Options(tokenizer="bytes", workers=0, seed=3)
    with Loader(Corpus.open_tokens(path), options).batches(64, 4) as batches:
        expected = sum(1 for _ in batches)
    flags = ["--tokenizer", "bytes", "--seed", "3", "--pack", "concat", "--seq-len", "64",
             "--batch-size", "4", "-q", "-j", "1"]  # fmt: skip
    state = tmp_path / "state.json"
    ran = owt("stream", path, *flags, "--state-out", str(state))
    assert ran.returncode == 0, ran.stderr
    assert f"into {expected:,} batches of 4 x 65 ids" in ran.stderr
    saved = json.loads(state.read_text())
    assert saved["batches"] == expected
    again = owt("stream", path, *flags, "--resume", str(state))  # (finished: nothing left)
    assert again.returncode == 0, again.stderr
    assert "into 0 batches" in again.stderr


def test_a_mixture_takes_token_files_as_a_part(owt: Owt, token_run: Path,
                                               small_corpus: Path) -> None:  # fmt: skip
    path = token_run / "train.bin"
    parts = {"ids": Corpus.open_tokens(path), "text": Corpus.open(small_corpus)}
    mixture = Mixture(parts, {"ids": 1, "text": 1})
    with Loader(mixture, Options(tokenizer="bytes", workers=0)).iter() as documents:
        subsets = Counter("ids" if d.subset == "train" else "text" for d in documents)
    ran = owt("stream", "--mix", f"ids={path}:1", "--mix", f"text={small_corpus}:1",
              "--tokenizer", "bytes", "-q", "-j", "1")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    for name in ("ids", "text"):
        assert f"  {name}: {subsets[name]:,} documents, " in ran.stderr
    assert "MB of text and ids" in ran.stderr


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ([], "give --tokenizer"),
        (["--jsonl"], "--jsonl writes text: files of token ids hold none"),
        (["--tokenizer", "bytes", "--cache-dir", "CACHE"], "leave --cache-dir"),
        (["--tokenizer", "bytes", "--text-column", "body"], "--text-column out"),
    ],
)
def test_owt_stream_refuses_what_token_files_cannot_do(
    owt: Owt, token_run: Path, tmp_path: Path, extra: list[str], said: str
) -> None:
    extra = [str(tmp_path / "cache") if a == "CACHE" else a for a in extra]
    ran = owt("stream", str(token_run / "train.bin"), *extra, "-q", "-j", "1")
    assert ran.returncode == 2, ran.stderr
    assert said in ran.stderr
    assert "Traceback" not in ran.stderr


def test_token_files_beside_a_text_corpus_are_refused(
    owt: Owt, token_run: Path, small_corpus: Path
) -> None:
    ran = owt("stream", str(token_run / "train.bin"), str(small_corpus), "--tokenizer", "bytes",
              "-q")  # fmt: skip
    assert ran.returncode == 2
    assert "not both: a mixture takes each as a part" in ran.stderr
    mixed = owt("stream", "--mix", f"ids={token_run / 'train.bin'}:1", "--mix",
                f"text={small_corpus}:1", "--jsonl")  # fmt: skip
    assert mixed.returncode == 2
    assert "a part of token ids holds none" in mixed.stderr


# -- what a red team of the door found (session 40) -----------------------------------------


@pytest.mark.parametrize(("made", "data", "beside"), [
    ("megatron", "train.bin", "train.idx"), ("datatrove", "train.ds", "train.ds.index"),
    (None, "train.bin", "meta.json"), ("llmc", "train_000000.bin", "llmc.json"),
])  # fmt: skip
def test_state_out_never_replaces_a_file_read_beside_the_ids(
    owt: Owt, token_run: Path, tmp_path: Path, made: str | None, data: str, beside: str
) -> None:
    run = Path(shutil.copytree(token_run, tmp_path / "run"))
    before = (run / beside).read_bytes()
    ran = owt("stream", str(run / data), "--tokenizer", "bytes", "-q", "-j", "0",
              "--state-out", str(run / beside))  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert "--state-out names a file this run reads" in ran.stderr
    assert (run / beside).read_bytes() == before


def test_a_signed_url_of_a_token_file_is_a_token_file() -> None:
    assert token_files(["https://host/run/train.bin?X-Amz-Signature=abc&X-Amz-Date=1"])
    assert token_files(["s3://bucket/run/train.ds"])
    assert not token_files(["https://host/data/part-0.parquet?sig=a.bin"])


def test_a_bare_bin_is_read_with_the_tokenizer_s_end_of_text(
    owt: Owt, token_run: Path, tmp_path: Path
) -> None:
    """nanoGPT's users copy train.bin alone: no meta.json says its end-of-text id, so the
    --tokenizer given says it (the library's default is GPT-2's, 50256)."""
    (tmp_path / "bare").mkdir()
    shutil.copy(token_run / "train.bin", tmp_path / "bare" / "train.bin")
    ran = owt("stream", str(tmp_path / "bare" / "train.bin"), "--tokenizer", "bytes", "-q",
              "-j", "0")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    documents, tokens = _meta_counts(token_run)
    assert f"{documents:,} documents, {tokens:,} ids, " in ran.stderr


def test_a_quoted_glob_of_llmc_shards_reads_them_in_order(owt: Owt, token_run: Path) -> None:
    shards = sorted(token_run.glob("train_*.bin"))
    assert len(shards) > 1
    listed = owt("stream", *map(str, shards), "--tokenizer", "bytes", "-q", "-j", "0",
                 "--no-shuffle")  # fmt: skip
    pattern = owt("stream", str(token_run / "train_*.bin"), "--tokenizer", "bytes", "-q",
                  "-j", "0", "--no-shuffle")  # fmt: skip
    assert (listed.returncode, pattern.returncode) == (0, 0), pattern.stderr
    line = lambda err: err.splitlines()[-1].split(" in ")[0]  # noqa: E731
    assert line(pattern.stderr) == line(listed.stderr)


def test_a_held_out_split_of_token_files_is_counted_without_a_cache_or_a_word(
    owt: Owt, token_run: Path, tmp_path: Path
) -> None:
    (tmp_path / "ids").mkdir()
    data = tmp_path / "ids" / "data.bin"
    shutil.copy(token_run / "train.bin", data)
    shutil.copy(token_run / "meta.json", tmp_path / "ids" / "meta.json")
    for rank in ("0", "1"):
        ran = owt("stream", str(data), "--tokenizer", "bytes", "-q", "-j", "0", "--split",
                  "val", "--val-fraction", "0.3", "--world-size", "2", "--rank", rank)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "counting the documents" not in ran.stderr
    assert sorted(p.name for p in data.parent.iterdir()) == ["data.bin", "meta.json"]


def test_errors_speak_in_flags(owt: Owt, token_run: Path) -> None:
    ran = owt("stream", str(token_run / "train.bin"), "--tokenizer", "bytes", "-q", "--split",
              "train")  # fmt: skip
    assert ran.returncode == 2
    assert "read it with --split all" in ran.stderr and "options={" not in ran.stderr
    assert as_flags("3 skipped, more than max_errors=2") == "3 skipped, more than --max-errors 2"
    for untouched in ("data/split=train/a.parquet: bad", "part 'web': split=a/c.tar: bad",
                      "c.tar[m]: not UTF-8 (document seed=1.txt)"):  # fmt: skip
        assert as_flags(untouched) == untouched
    assert as_flags("passes max_document_bytes=3") == "passes --max-document-bytes 3"


@pytest.mark.parametrize("flag", [["--max-document-bytes", "100"], ["--decode-errors", "replace"]])
def test_a_flag_that_shapes_text_is_refused_with_token_files(
    owt: Owt, token_run: Path, flag: list[str]
) -> None:
    ran = owt("stream", str(token_run / "train.bin"), "--tokenizer", "bytes", "-q", *flag)
    assert ran.returncode == 2
    assert f"{flag[0]} shapes text: files of token ids hold none" in ran.stderr
