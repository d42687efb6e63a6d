"""Every reader of a file of records parses it with ``codec.parse``: a file nested too deeply
for Python's parser (a damaged or hostile file) is that reader's own damaged-file error naming
the file, never a ``RecursionError`` (a traceback from ``owt``); a string that is not text (a
lone surrogate, which JSON's ``"\\udcff"`` is) in any field is a ``StateError`` naming it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from openwebtext import Corpus, Loader, StateError
from openwebtext.prepare import PrepareError, PrepareOptions, prepare
from openwebtext.stream.state import load_state
from openwebtext.tokenfiles import TokenFileError
from support import run_owt

GOLDEN = Path(__file__).parent / "fixtures" / "prepare-2"
DEEP = "[" * 200_000 + "]" * 200_000


def _deep(fmt: str) -> str:
    return f'{{"format": "{fmt}", "config": {DEEP}}}'


def test_a_state_file_nested_too_deeply(
    small_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state.json"
    state.write_text(_deep("openwebtext-state/2"))
    with pytest.raises(StateError, match=f"^{state}: not a JSON state file: JSON nested too deep"):
        load_state(state)
    ran = run_owt(capsys, "stream", str(small_corpus), "-q", "--resume", str(state))
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert ran.stderr.startswith(f"owt: error: {state}: not a JSON state file: JSON nested")


def test_a_progress_record_nested_too_deeply(tmp_path: Path) -> None:
    corpus = Corpus.open(shutil.copytree(GOLDEN / "corpus", tmp_path / "corpus"))
    out = shutil.copytree(GOLDEN / "runs" / "hash-tokenize", tmp_path / "out")
    (out / ".owt-progress.json").write_text(_deep("openwebtext-prepare/2"))
    options = PrepareOptions(split_rule="hash", tokenizer="gpt2", workers=0, val_fraction=0.25)
    with pytest.raises(PrepareError, match=r"is not a progress record \(JSON nested too deep"):
        prepare(corpus, out, options)


def test_a_token_file_s_meta_json_nested_too_deeply(token_run: Path, tmp_path: Path) -> None:
    for name in ("train.bin", "val.bin"):
        (tmp_path / name).write_bytes((token_run / name).read_bytes())
    (tmp_path / "meta.json").write_text(_deep("openwebtext-prepare/2"))
    with pytest.raises(TokenFileError, match=r"meta\.json: not JSON: JSON nested too deep"):
        Corpus.open_tokens(tmp_path / "train.bin")


def test_a_counts_file_nested_too_deeply_is_damaged_and_counted_again(
    small_corpus: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = Corpus.open(shutil.copytree(small_corpus, tmp_path / "c"))
    corpus.counts_paths()[0].write_text(_deep("openwebtext-counts/1"))
    with caplog.at_level(logging.WARNING, logger="openwebtext"):
        assert corpus.load_counts() is None
    assert "is damaged (JSON nested too deeply to parse)" in caplog.text


@pytest.mark.parametrize("field", [("config", "tokenizer"), ("config", "split"), ("pos\udcff",)])
def test_a_string_that_is_not_text_is_refused_in_any_field(
    small_corpus: Path, field: tuple[str, ...]
) -> None:
    """Only fields of a fixed choice said so (``config.split``: msgspec encodes it to compare);
    a free one (``config.tokenizer``) took it."""
    loader = Loader(small_corpus, workers=0)
    with loader.iter() as it:
        next(it)
        state = json.loads(json.dumps(it.state_dict()))
    *parents, last = field
    node = state
    for key in parents:
        node = node[key]
    node[last] = "\udcff"
    named = ".".join(field).encode("utf-8", "backslashreplace").decode()
    with pytest.raises(StateError, match="a string that is not text") as caught:
        loader.iter(state=state)
    assert caught.value.field == named
