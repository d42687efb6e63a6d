"""``read_openwebtext`` over a token corpus (``Corpus.open_tokens``, or a mixture's part): rows
of each document's ids as the file holds them, the very documents ``Loader`` hands out, never
its id bytes decoded as text and tokenized again; without a tokenizer, an error at once.

The Ray instance is test_ray.py's (its ``home`` and ``ray_instance`` fixtures, one per module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture
from openwebtext.errors import CorpusError, CorruptDocument
from support import plain_read

ray = pytest.importorskip(
    "ray", reason="the ray extra is not installed (from the clone: pip install -e '.[ray]')"
)

from openwebtext import ray as owt_ray  # noqa: E402
from test_ray import home, ray_instance  # noqa: E402, F401

pytestmark = [
    pytest.mark.ray,
    pytest.mark.usefixtures("ray_instance"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]

EOT = 256  # the bytes tokenizer's (the ids of conftest.py's ``token_run``)
UNIT = 3_000  # ids a unit holds: a few dozen units, tasks of two


Key = tuple[str, str, str]


def _loader_documents(corpus: Corpus, **options: Any) -> tuple[dict[Key, list[int]], Any]:
    """What the library's own loader hands out of ``corpus``, by (subset, member, name), and
    its stats."""
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False, **options)
    with loader.iter() as it:
        docs = {(d.subset, d.member, d.name): d.tokens.tolist() for d in it}
        return docs, it.stats


def _ray_documents(rows: list[dict[str, Any]]) -> dict[Key, list[int]]:
    docs = {(r["subset"], r["member"], r["name"]): [int(i) for i in r["ids"]] for r in rows}
    assert len(docs) == len(rows)  # no document twice
    return docs


def _nanogpt_alone(token_run: Path, folder: Path) -> Path:
    """train.bin alone (no idx, no meta.json beside it): cut at its own eot, given."""
    folder.mkdir()
    (folder / "train.bin").write_bytes((token_run / "train.bin").read_bytes())
    return folder / "train.bin"


def _int16_datatrove(token_run: Path, folder: Path) -> tuple[Path, int]:
    """val.ds as int16 ids (no meta.json: ``dtype="int16"``), one document's id made -5 (outside
    the vocabulary, as a signed file's ids may be); and how many ids in its documents."""
    folder.mkdir()
    ids = np.fromfile(token_run / "val.ds", dtype="<u2").astype("<i2")
    ids[len(ids) // 2] = -5
    (folder / "val.ds").write_bytes(ids.tobytes())
    (folder / "val.ds.index").write_bytes((token_run / "val.ds.index").read_bytes())
    return folder / "val.ds", len(ids)


@pytest.mark.parametrize("fmt", ["nanogpt", "megatron", "datatrove"])
def test_a_token_corpus_gives_the_loaders_documents(
    token_run: Path, tmp_path: Path, fmt: str
) -> None:
    """Each format's documents, id for id, as ``Loader`` gives them: a nanoGPT train.bin with
    its own eot (256, not GPT-2's), a Megatron .bin/.idx, a datatrove .ds of int16 holding an
    id outside the vocabulary (left out by both under skip, and counted)."""
    skip = fmt == "datatrove"
    if fmt == "nanogpt":
        corpus = Corpus.open_tokens(_nanogpt_alone(token_run, tmp_path / "alone"), eot=EOT,
                                    unit_tokens=UNIT)  # fmt: skip
    elif fmt == "megatron":
        corpus = Corpus.open_tokens(token_run / "train.bin", unit_tokens=UNIT)  # its .idx
    else:
        path, _ = _int16_datatrove(token_run, tmp_path / "ds")
        corpus = Corpus.open_tokens(path, dtype="int16", unit_tokens=UNIT)
    assert len(corpus.units) > 2
    on_error = "skip" if skip else "raise"
    expected, stats = _loader_documents(corpus, on_error=on_error)
    for given in (Mixture({"tok": corpus}), corpus):  # a mixture's one part, or the corpus
        log = owt_ray.SkipLog()
        dataset = owt_ray.read_openwebtext(given, tokenizer="bytes", units_per_task=2,
                                           on_error=on_error, skips=log)  # fmt: skip
        rows = dataset.take_all()
        mixed = isinstance(given, Mixture)
        columns = {"subset", "member", "name", "ids"} | ({"source"} if mixed else set())
        assert set(rows[0]) == columns
        assert {r.get("source") for r in rows} == {"tok" if mixed else None}
        got = _ray_documents(rows)
        assert len(got) == len(expected) > 10 and got == expected
        assert all(ids[-1] == EOT for ids in got.values())  # the file's own eot, none added
        assert log.count() == stats.skipped_documents == (1 if skip else 0)
    if skip:
        assert "outside the tokenizer's vocabulary of 257 (e.g. -5)" in log.messages()[0]
        with pytest.raises(CorruptDocument, match="outside the tokenizer's vocabulary"):
            owt_ray.read_openwebtext(corpus, tokenizer="bytes").take_all()


def test_a_mixtures_token_part_gives_its_documents_with_its_source(
    token_run: Path, small_corpus: Path, tmp_path: Path
) -> None:
    tokens = Corpus.open_tokens(_nanogpt_alone(token_run, tmp_path / "alone"), eot=EOT,
                                unit_tokens=UNIT)  # fmt: skip
    mixture = Mixture({"web": small_corpus, "tok": tokens}, {"web": 0.5, "tok": 0.5})
    rows = owt_ray.read_openwebtext(mixture, tokenizer="bytes", units_per_task=2).take_all()
    assert set(rows[0]) == {"source", "subset", "member", "name", "ids"}
    expected, _ = _loader_documents(tokens)
    assert _ray_documents([r for r in rows if r["source"] == "tok"]) == expected
    web = {r["name"]: bytes(r["ids"][:-1]).decode() for r in rows if r["source"] == "web"}
    assert web == plain_read(sorted(small_corpus.glob("*.tar")))  # the text part: as before


def test_a_token_corpus_without_a_tokenizer_is_refused_at_once(
    token_run: Path, small_corpus: Path, tmp_path: Path
) -> None:
    """A token corpus holds no text: ``read_openwebtext`` says so, naming the file (and the
    part), never a dataset of zero rows."""
    path = _nanogpt_alone(token_run, tmp_path / "alone")
    tokens = Corpus.open_tokens(path, eot=EOT, unit_tokens=UNIT)
    mixture = Mixture({"web": small_corpus, "tok": tokens})
    with pytest.raises(CorpusError, match=r"part 'tok': .*train\.bin: a token corpus holds ids"):
        owt_ray.read_openwebtext(mixture)
    with pytest.raises(CorpusError, match="a token corpus holds ids, not text") as caught:
        owt_ray.read_openwebtext(tokens)
    assert caught.value.path == str(path)


def test_a_tokenizer_the_ids_were_not_written_with_is_refused_as_the_loader_refuses_it(
    token_run: Path
) -> None:
    """train.bin's meta.json says its ids are the bytes tokenizer's: GPT-2's (the same width)
    is refused by the loader's own check, in the task, under ``on_error="skip"`` too (a
    ``WrongTokenizer``: before, every unit was a skip and the dataset had no row)."""
    corpus = Corpus.open_tokens(token_run / "train.bin", unit_tokens=UNIT)
    said = r"its ids were written with the tokenizer 'bytes' .* not read with 'gpt2'"
    with pytest.raises(CorpusError, match=said):
        list(Loader(corpus, tokenizer="gpt2", workers=0))
    for given in (Mixture({"tok": corpus}), corpus):
        for on_error in ("raise", "skip"):  # (skip: the options' fault is never a skip)
            with pytest.raises(CorpusError, match=said) as caught:
                owt_ray.read_openwebtext(given, tokenizer="gpt2", on_error=on_error).take_all()
            assert caught.value.path == str(token_run / "train.bin")


def test_ids_that_read_as_ascii_text_are_not_tokenized_again(tmp_path: Path) -> None:
    """"hi" and "jk" as bytes-tokenizer ids: their little-endian bytes are valid UTF-8 (h, NUL,
    i, NUL…), so they were read as text and tokenized again, silently: [104, 0, 105, 0, 0, 1,
    256] for the file's [104, 105, 256]."""
    path = tmp_path / "train.bin"
    np.array([104, 105, EOT, 106, 107, EOT], "<u2").tofile(path)
    tokens = Corpus.open_tokens(path, eot=EOT)
    for given in (Mixture({"tok": tokens}), tokens):
        rows = owt_ray.read_openwebtext(given, tokenizer="bytes").take_all()
        assert sorted(list(r["ids"]) for r in rows) == [[104, 105, EOT], [106, 107, EOT]]
        assert sorted(r["name"] for r in rows) == ["0", "1"]
