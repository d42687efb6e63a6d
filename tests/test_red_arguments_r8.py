"""Arguments a red team (session 31) found taken unchecked by public doors, then failing deep
inside (or answering for nonsense): each is now refused at the call, naming the argument."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Schedule, StateError
from openwebtext.errors import CorpusError
from openwebtext.prepare import PrepareOptions, merge, prepare
from openwebtext.stream import Ahead
from openwebtext.synth import default_corpus_path, write_corpus
from tables_support import sample_texts, write_jsonl


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("args") / "js"
    write_jsonl(folder / "a.jsonl", sample_texts(12))
    return folder


def test_open_tokens_says_what_its_paths_are(jsonl: Path, tmp_path: Path) -> None:
    for bad in (True, 5, b"x", {}):
        with pytest.raises(TypeError, match=r"token files are paths or URLs"):
            Corpus.open_tokens(bad)  # type: ignore[arg-type]
    with pytest.raises(CorpusError, match=r"is a folder: give a token file in it"):
        Corpus.open_tokens(tmp_path)  # (was "no such token file": it exists)
    with pytest.raises(CorpusError, match=r"is not a regular file"):
        Corpus.open_tokens("/dev/null")


def test_prepare_refuses_the_corpus_s_folder_and_bad_run_arguments(
    jsonl: Path, tmp_path: Path
) -> None:
    corpus, options = Corpus.open(jsonl), PrepareOptions(tokenizer="bytes", workers=0)
    with pytest.raises(ValueError, match=r"is a folder of the corpus's files"):
        prepare(corpus, jsonl, options)  # (owt tokenize refused it; prepare wrote beside)
    assert sorted(p.name for p in jsonl.iterdir()) == ["a.jsonl"]
    out = tmp_path / "o"
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"progress": 5}, TypeError, "progress must be None or a callable"),
        ({"checkpoint_seconds": "2"}, ValueError, "checkpoint_seconds must be"),
        ({"checkpoint_seconds": math.nan}, ValueError, "checkpoint_seconds must be"),
        ({"checkpoint_seconds": -1}, ValueError, "checkpoint_seconds must be"),
        ({"restart": "yes"}, TypeError, "restart must be a bool"),
        ({"wait": 1}, TypeError, "wait must be a bool"),
    ]  # fmt: skip
    for kwargs, error, said in bad:
        with pytest.raises(error, match=said):
            prepare(corpus, out, options, **kwargs)
        with pytest.raises(error, match=said):
            merge([out], tmp_path / "m", **kwargs)
    assert not out.exists()


def test_a_state_of_numpy_is_a_state_error(jsonl: Path) -> None:
    state = Loader(jsonl, workers=0).iter().state_dict()
    for given in (np.array(state, dtype=object), np.int64(3)):
        with pytest.raises(StateError, match=r"an object as JSON's, not a"):
            Loader(jsonl, workers=0).iter(state=given)  # (was msgspec's IndexError)
    proxied = types.MappingProxyType(json.loads(json.dumps(state)))  # (any mapping: taken)
    assert len(list(Loader(jsonl, workers=0).iter(state=proxied))) == 12


def test_a_schedule_s_shape_of_no_batch_index_is_refused() -> None:
    schedule = Schedule([(0, 64, 8), (10, 128, 4)])
    assert schedule.shape(np.int64(11)) == (128, 4)
    for bad in (-1, math.nan, 1.5, "3", True):  # (-1 was the last step's shape)
        with pytest.raises(ValueError, match=r"batch must be an int >= 0"):
            schedule.shape(bad)  # type: ignore[arg-type]


def test_ahead_and_synth_check_their_arguments(jsonl: Path, tmp_path: Path) -> None:
    batches = Loader(jsonl, workers=0, tokenizer="bytes").batches(seq_len=8, batch_size=1)
    for name in ("move", "receive"):
        with pytest.raises(TypeError, match=rf"{name} must be a callable taking a batch"):
            Ahead(batches, **{name: 5})
    with pytest.raises(TypeError, match=r"out must be a folder's path"):
        write_corpus(5, subsets=1, members=1, docs=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"cache_dir must be None or a folder's path"):
        default_corpus_path(5)  # type: ignore[arg-type]


def test_the_torch_and_hf_doors_check_theirs() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch.nn.attention.flex_attention")
    from openwebtext.hf import shard_options
    from openwebtext.torch import document_block_mask

    rows = torch.tensor([[1, 1, 2, 2]])
    for bad in (0, -1, 1.5, True, 2**70):
        with pytest.raises(ValueError, match=r"block_size must be an int >= 1"):
            document_block_mask(rows, block_size=bad)  # type: ignore[arg-type]
    for shape in ((0, 5), (2, 0), (0, 0)):  # (torch's IndexError, or an internal assert)
        with pytest.raises(ValueError, match=r"takes at least one row of one position"):
            document_block_mask(torch.zeros(shape, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"options must be an Options, not NoneType"):
        shard_options(None, 0, 2)  # type: ignore[arg-type]


def test_read_openwebtext_refuses_skips_that_are_no_skip_log(jsonl: Path) -> None:
    """Checked before Ray is asked: it failed at the first skip, inside a Ray task."""
    pytest.importorskip("ray")
    from openwebtext.ray import read_openwebtext

    with pytest.raises(TypeError, match=r"skips must be None or a SkipLog, not str"):
        read_openwebtext(str(jsonl), on_error="skip", skips="log")  # type: ignore[arg-type]
