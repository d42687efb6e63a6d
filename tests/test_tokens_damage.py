"""Token files that are damaged, given twice, or read with the wrong tokenizer: each an
error naming the file (or, for ids past the vocabulary, a counted skip), never ids read as
something they are not."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader
from openwebtext.errors import CorpusError, CorruptDocument
from openwebtext.prepare import PrepareOptions, prepare, write_format
from openwebtext.tokenfiles import TokenFileError, llmc_header, open_token_file

EOT = 256  # the bytes tokenizer's


@pytest.fixture(scope="module")
def run(small_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("token-run")
    prepare(Corpus.open(small_corpus), out, PrepareOptions(tokenizer="bytes", workers=0))
    for fmt in ("llmc", "datatrove"):
        write_format(out, fmt, shard_tokens=40_000)
    return out


def _docs(*docs: list[int]) -> np.ndarray:
    return np.concatenate([np.array([*d, EOT], dtype="<u2") for d in docs])


# -- a damaged llm.c header is an error, never a bare train.bin ------------------------------


@pytest.mark.parametrize("magic", [0, 20240521, -1, 0x20240520])
def test_an_llmc_shard_with_a_damaged_magic_is_refused(tmp_path: Path, magic: int) -> None:
    ids = _docs([1, 2, 3], [4, 5])
    header = np.frombuffer(llmc_header(len(ids)), dtype="<i4").copy()
    header[0] = magic
    path = tmp_path / "train_000000.bin"
    path.write_bytes(header.tobytes() + ids.tobytes())
    with pytest.raises(TokenFileError, match="magic") as raised:
        open_token_file(path, eot=EOT)
    assert raised.value.path == str(path)
    with pytest.raises(TokenFileError, match=r"train_000000\.bin"):
        Corpus.open_tokens(path, eot=EOT)


def test_a_bare_train_bin_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "train.bin"
    ids = _docs(*[[k % 250 + 1] * 300 for k in range(10)])
    path.write_bytes(ids.tobytes())
    assert len(open_token_file(path, eot=EOT).ends) == 10


# -- ids past the vocabulary are never handed out ------------------------------------------


@pytest.mark.parametrize("bad", [257, 300, 65535])
def test_ids_past_the_vocabulary_are_a_document_error(tmp_path: Path, bad: int) -> None:
    path = tmp_path / "train.bin"
    path.write_bytes(_docs([1, 2, 3], [4, bad, 6], [7, 8]).tobytes())
    corpus = Corpus.open_tokens(path, eot=EOT)
    with pytest.raises(CorruptDocument, match="vocabulary") as raised:
        list(Loader(corpus, tokenizer="bytes", workers=0, shuffle=False))
    assert raised.value.path == str(path) and raised.value.document == "1"
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False, on_error="skip")
    with loader.iter() as it:
        got = [d.tokens.tolist() for d in it]  # type: ignore[union-attr]
        assert it.stats.skipped_documents == 1
    assert got == [[1, 2, 3, EOT], [7, 8, EOT]]


# -- the same token file twice --------------------------------------------------------------


@pytest.mark.parametrize("how", ["same", "spelling", "symlink", "hardlink"])
def test_the_same_token_file_twice_is_refused(run: Path, tmp_path: Path, how: str) -> None:
    train = run / "train.bin"
    other = {
        "same": train,
        "spelling": run / ".." / run.name / "train.bin",
        "symlink": tmp_path / "link.bin",
        "hardlink": tmp_path / "hard.bin",
    }[how]
    if how == "symlink":
        other.symlink_to(train)
    elif how == "hardlink":
        os.link(train, other)
    with pytest.raises(CorpusError, match="given twice"):
        Corpus.open_tokens([train, other])


def test_the_ds_beside_its_train_bin_is_the_same_file(run: Path) -> None:
    if (run / "train.ds").stat().st_ino != (run / "train.bin").stat().st_ino:
        pytest.skip("this file system copies rather than links")
    with pytest.raises(CorpusError, match="given twice"):
        Corpus.open_tokens([run / "train.bin", run / "train.ds"])


# -- the tokenizer recorded beside the file -------------------------------------------------


@pytest.mark.parametrize("name", ["train.bin", "train.ds", "train_000000.bin"])
def test_another_tokenizer_of_the_same_width_is_refused(run: Path, name: str) -> None:
    corpus = Corpus.open_tokens(run / name)
    with pytest.raises(CorpusError, match=r"'bytes'.*'gpt2'") as raised:
        list(Loader(corpus, tokenizer="gpt2", workers=0))
    assert raised.value.path == str(run / name)
    assert list(Loader(corpus, tokenizer="bytes", workers=0))  # its own is read


# -- the run's meta.json beside the files: read by the one codec, never guessed past -------------


def _with_meta(run: Path, tmp_path: Path, meta: bytes) -> Path:
    """A copy of ``run``'s token files with ``meta`` as their meta.json."""
    out = tmp_path / "run"
    out.mkdir()
    for path in run.iterdir():
        if path.is_file() and path.name != "meta.json":
            os.link(path, out / path.name)
    (out / "meta.json").write_bytes(meta)
    return out


def _damaged(run: Path, **config: object) -> bytes:
    body = json.loads((run / "meta.json").read_text())
    body["config"].update(config)
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("damage", "field"),
    [
        ({"eot": True}, "config.eot: Expected `int`, got `bool`"),
        ({"eot": "256"}, "config.eot: Expected `int`, got `str`"),
        ({"eot": -1}, "config.eot: Expected `int` >= 0"),
        ({"dtype": "float32"}, "config.dtype: Expected `str` matching"),
        ({"fingerprint": 3}, "config.fingerprint: Expected `str`, got `int`"),
        ({"eot": 300}, "config.eot: is 300, not below n_vocab 257"),
    ],
)
@pytest.mark.parametrize("name", ["train.bin", "train.ds", "train_000000.bin"])
def test_a_damaged_meta_json_beside_the_files_names_it_and_its_field(
    run: Path, tmp_path: Path, name: str, damage: dict[str, object], field: str
) -> None:
    """A run's meta.json says the ids' eot, dtype and tokenizer: a wrong field was read as
    it stood (``eot: true`` as 1, ``float32`` ids) or passed over (GPT-2's eot, no tokenizer
    check); now it is one error naming the file and the field."""
    folder = _with_meta(run, tmp_path, _damaged(run, **damage))
    with pytest.raises(TokenFileError) as raised:
        list(Loader(Corpus.open_tokens(folder / name), tokenizer="bytes", workers=0))
    assert raised.value.path == str(folder / "meta.json")
    assert f"bad meta.json: {field}" in str(raised.value)


@pytest.mark.parametrize(
    ("meta", "said"),
    [
        (b"{not json", "not JSON"),
        (b'{"format": "openwebtext-prepare/1"}', "format: not 'openwebtext-prepare/2'"),
        (b'{"format": "openwebtext-prepare/2"}', "config: Object missing required field `config`"),
    ],
)
def test_a_meta_json_that_is_not_a_run_s_of_this_version_is_refused(
    run: Path, tmp_path: Path, meta: bytes, said: str
) -> None:
    folder = _with_meta(run, tmp_path, meta)
    with pytest.raises(TokenFileError, match=re.escape(said)):
        Corpus.open_tokens(folder / "train.bin", eot=EOT)


@pytest.mark.parametrize(
    "meta",
    [b'{"vocab_size": 50304}', b"[1, 2]", b'{"format": 2}', b'{"format": "openwebtext-state/2"}'],
)
def test_another_program_s_meta_json_is_not_a_run_s(run: Path, tmp_path: Path, meta: bytes) -> None:
    """A meta.json of no format of this project's is another program's: the ids are read as
    given (a bare train.bin: eot= and GPT-2's uint16)."""
    folder = _with_meta(run, tmp_path, meta)
    corpus = Corpus.open_tokens(folder / "train.bin", eot=EOT)
    documents = list(Loader(corpus, tokenizer="bytes", workers=0))
    assert corpus.counts is not None and len(documents) == sum(corpus.counts.documents)


def test_a_damaged_meta_json_beside_a_remote_file_names_its_url(run: Path, tmp_path: Path) -> None:
    """Beside a URL too (an HTTP range server on 127.0.0.1): a damaged meta.json was read as
    none (no tokenizer check); a missing one still is none."""
    pytest.importorskip("aiohttp")
    from remote_servers import RangeServer

    folder = _with_meta(run, tmp_path, _damaged(run, fingerprint=None))
    with RangeServer(folder) as server:
        with pytest.raises(TokenFileError, match=r"config\.fingerprint: Expected `str`") as raised:
            Corpus.open_tokens(f"{server.url}/train.ds")
        assert raised.value.path == f"{server.url}/meta.json"
        (folder / "meta.json").unlink()
        corpus = Corpus.open_tokens(f"{server.url}/train.ds")
        documents = list(Loader(corpus, tokenizer="bytes", workers=0))
        assert corpus.counts is not None and len(documents) == sum(corpus.counts.documents)


def test_an_eot_the_ids_cannot_hold_is_said_as_the_eot_given(tmp_path: Path) -> None:
    """``eot=70000`` for uint16 ids blamed the file ("its 5 ids do not end with the end-of-text
    id 70000"; red team, session 28): the eot given is what is wrong."""
    import numpy as np

    from openwebtext import Corpus

    path = tmp_path / "t.bin"
    np.array([1, 2, 50256, 3, 50256], np.uint16).tofile(path)
    with pytest.raises(ValueError, match="end-of-text id 70000 is no id of its uint16 ids"):
        Corpus.open_tokens(path, eot=70000)
