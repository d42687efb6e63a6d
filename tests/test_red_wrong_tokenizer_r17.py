"""A token corpus read without the tokenizer its ids were written with, under
``on_error="skip"`` or ``"warn"``: the options' fault, not the data's.

Before, the reader's refusal was a plain ``CorpusError``, so the skip policy counted every unit
of the file as a skipped member: a run of no document, or a mixture that said its part
"yielded no document", the cause buried in ``stats.skipped``. It is now a ``WrongTokenizer``,
raised whatever ``on_error`` says (``OWTError.skippable``), as the machine running out is.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from openwebtext import Corpus, Loader, Mixture
from openwebtext.errors import CorpusError, CorruptDocument, CorruptMember, WrongTokenizer
from openwebtext.policy import SkipPolicy
from openwebtext.stream import count_documents
from openwebtext.tokenizer import TokenizerError

UNIT = 1 << 12


def _wide(token_run: Path, tmp_path: Path) -> Path:
    """val.ds with its ids widened to uint32: ids of 4 bytes, for the bytes tokenizer's 2."""
    wide = np.fromfile(token_run / "val.bin", dtype="<u2").astype("<u4")
    (tmp_path / "val.ds").write_bytes(wide.tobytes())
    (tmp_path / "val.ds.index").write_bytes((token_run / "val.ds.index").read_bytes())
    return tmp_path / "val.ds"


def _case(case: str, token_run: Path, tmp_path: Path) -> tuple[Corpus, str | None, str]:
    """The corpus, the tokenizer it is wrongly read with, and what the error says."""
    if case == "none":
        corpus = Corpus.open_tokens(token_run / "train.bin", unit_tokens=UNIT)
        return corpus, None, "read with the tokenizer its ids were written with: give"
    if case == "width":
        corpus = Corpus.open_tokens(_wide(token_run, tmp_path), dtype="uint32")
        return corpus, "bytes", "ids of 4 bytes, not the 2 of the tokenizer 'bytes'"
    corpus = Corpus.open_tokens(token_run / "train.bin", unit_tokens=UNIT)
    return corpus, "gpt2", r"written with the tokenizer 'bytes' .* not read with 'gpt2'"


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("on_error", ["skip", "warn"])
@pytest.mark.parametrize("case", ["none", "width", "fingerprint"])
def test_a_wrong_tokenizer_is_raised_under_skip_not_counted(
    token_run: Path, tmp_path: Path, case: str, on_error: str, workers: int,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    corpus, tokenizer, said = _case(case, token_run, tmp_path)
    loader = Loader(corpus, tokenizer=tokenizer, workers=workers, on_error=on_error)
    with caplog.at_level(logging.WARNING, "openwebtext"), pytest.raises(
        WrongTokenizer, match=said
    ) as caught:  # fmt: skip
        list(loader)
    assert caught.value.path == corpus.units[0].path
    assert isinstance(caught.value, CorpusError) and not isinstance(caught.value, CorruptMember)
    assert "skipped" not in caplog.text  # (never a warn line: it was not skipped)


def test_a_mixture_s_part_read_with_a_wrong_tokenizer_names_the_part(
    token_run: Path, small_corpus: Path
) -> None:  # fmt: skip
    """The part is refused for what it is: not "epoch 0 yielded no document (N members or
    files skipped)", the mixture's error when every unit of a part was skipped."""
    tokens = Corpus.open_tokens(token_run / "train.bin", unit_tokens=UNIT)
    mixture = Mixture({"web": Corpus.open(small_corpus), "tok": tokens})
    loader = Loader(mixture, tokenizer="gpt2", workers=0, on_error="skip")
    with pytest.raises(WrongTokenizer, match=r"^part 'tok': .*not read with 'gpt2'") as caught:
        list(loader)
    assert caught.value.part == "tok"


def test_the_right_tokenizer_under_skip_reads_every_document(token_run: Path) -> None:
    """The other side: the file read with its own tokenizer under skip is read whole."""
    corpus = Corpus.open_tokens(token_run / "train.bin", unit_tokens=UNIT)
    with Loader(corpus, tokenizer="bytes", workers=1, on_error="skip").iter() as it:
        documents = [d.tokens.tolist() for d in it]
        assert it.stats.skipped_members == 0
    raised = Loader(corpus, tokenizer="bytes", workers=0, on_error="raise")
    assert len(corpus.units) > 1 and documents == [d.tokens.tolist() for d in raised]


@pytest.mark.parametrize("on_error", ["skip", "warn"])
def test_the_skip_policy_never_counts_what_is_not_the_data_s_fault(on_error: str) -> None:
    """The one rule (``SkipPolicy.take``), which every engine applies: the stream, ``owt
    tokenize``, Ray's tasks, and counting (``count_documents``)."""
    policy = SkipPolicy(on_error)
    error = WrongTokenizer("ids of 4 bytes, not the 2 of the tokenizer 'bytes'", "x.ds", "m")
    with pytest.raises(WrongTokenizer):
        policy.take(error)
    with pytest.raises(TokenizerError):
        policy.take(TokenizerError("tokenizer 'hf:x.json': no end-of-text token"))
    counts: dict[str, int] = {}
    with pytest.raises(WrongTokenizer):
        policy.count(error, counts)
    assert counts == {}
    assert policy.take(CorruptMember("corrupt xz data", "x.tar", "m")) == "skipped_members"


def test_counting_documents_raises_what_is_not_skippable(
    monkeypatch: pytest.MonkeyPatch, small_corpus: Path
) -> None:  # fmt: skip
    """``count_documents`` under skip counts a bad member as none, but a unit whose error is
    not the data's fault ends the count (it would be cached as the corpus's counts)."""
    from openwebtext.engine import inline

    real = inline.read_unit
    corpus = Corpus.open(small_corpus)

    def refuse(reader, tokenizer, unit, normalise=False):  # type: ignore[no-untyped-def]
        if unit == corpus.units[1]:
            raise WrongTokenizer("not the tokenizer", unit.path, unit.member)
        return real(reader, tokenizer, unit, normalise)

    monkeypatch.setattr(inline, "read_unit", refuse)
    with pytest.raises(WrongTokenizer, match="not the tokenizer"):
        count_documents(corpus, workers=0, on_error="skip")


# --- ids of another tokenizer, with no meta.json to say so -------------------------------------


def _ids_file(path: Path, documents: list[list[int]]) -> Path:
    """``documents`` as uint16 ids, each ended by the bytes tokenizer's end-of-text (256)."""
    np.array([i for d in documents for i in (*d, 256)], dtype="<u2").tofile(path)
    return path


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_ids_of_another_tokenizer_without_a_meta_json_are_refused(
    tmp_path: Path, on_error: str
) -> None:  # fmt: skip
    """GPT-2's ids (llm.c's or another tool's file: no meta.json) read with the bytes
    tokenizer: every document was a skipped document under skip, a run of none."""
    path = _ids_file(tmp_path / "ids.bin", [[300 + k, 4000, 65] for k in range(10)])
    corpus = Corpus.open_tokens(path, eot=256)
    loader = Loader(corpus, tokenizer="bytes", workers=0, on_error=on_error, shuffle=False)
    said = r"10 of its 10 documents hold ids outside the tokenizer's vocabulary of 257 \(e\.g\. 300"
    with pytest.raises(WrongTokenizer, match=said) as caught:
        list(loader)
    assert caught.value.path == str(path)


def test_one_document_of_ids_outside_the_vocabulary_is_still_a_bad_document(
    tmp_path: Path
) -> None:  # fmt: skip
    """The other side: a few damaged documents among many are the file's, skipped."""
    documents = [[65 + k, 66] for k in range(10)]
    documents[3] = [65, 9000]
    path = _ids_file(tmp_path / "ids.bin", documents)
    corpus = Corpus.open_tokens(path, eot=256)
    with pytest.raises(CorruptDocument, match="outside the tokenizer's vocabulary of 257"):
        list(Loader(corpus, tokenizer="bytes", workers=0, shuffle=False))
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False, on_error="skip")
    with loader.iter() as it:
        got = [d.tokens.tolist() for d in it]
        assert it.stats.skipped_documents == 1
    assert got == [[*d, 256] for k, d in enumerate(documents) if k != 3]


def test_a_run_s_meta_json_says_why_before_its_ids_are_judged(
    small_corpus: Path, tmp_path: Path
) -> None:  # fmt: skip
    """GPT-2's ids beside their run's meta.json, read with the bytes tokenizer (the same
    width; most ids outside its vocabulary): the refusal names the tokenizer to read them
    with, from the record, not the ids."""
    from openwebtext.prepare import PrepareOptions, prepare

    options = PrepareOptions(tokenizer="gpt2", workers=0, val_fraction=0.2)
    prepare(Corpus.open(small_corpus), tmp_path / "run", options)
    corpus = Corpus.open_tokens(tmp_path / "run" / "val.bin")
    said = r"written with the tokenizer 'gpt2' .* not read with 'bytes'.*: read it with 'gpt2'"
    for on_error in ("raise", "skip"):
        with pytest.raises(WrongTokenizer, match=said):
            list(Loader(corpus, tokenizer="bytes", workers=0, on_error=on_error))


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_tokenizer_that_writes_its_end_of_text_inside_a_document_is_refused(
    small_corpus: Path, monkeypatch: pytest.MonkeyPatch, on_error: str
) -> None:  # fmt: skip
    """The loaded tokenizers are checked for it (``load_hf``); the ids of every member are too,
    in one pass: a document would be cut at the id, and a token file count one more."""
    from openwebtext import Tokenizer

    real = Tokenizer.encode_packed

    def with_eot_inside(self, texts):  # type: ignore[no-untyped-def]
        ids, counts = real(self, texts)
        ids = ids.copy()
        ids[1] = self.eot  # (inside the first document: it has more than two ids)
        return ids, counts

    monkeypatch.setattr(Tokenizer, "encode_packed", with_eot_inside)
    loader = Loader(Corpus.open(small_corpus), tokenizer="bytes", workers=0, on_error=on_error)
    said = r"the tokenizer 'bytes' wrote its end-of-text id 256 inside document \S+"
    with pytest.raises(WrongTokenizer, match=said) as caught:
        list(loader)
    assert caught.value.path is not None and caught.value.member is not None


def _skip(corpus: Corpus, **options: object) -> tuple[list[list[int]], int]:
    """The documents' ids read with the bytes tokenizer under skip, and the skipped ones."""
    loader = Loader(corpus, tokenizer="bytes", workers=0, shuffle=False, on_error="skip",
                    **options)  # type: ignore[arg-type]  # fmt: skip
    with loader.iter() as it:
        return [d.tokens.tolist() for d in it], it.stats.skipped_documents


def test_a_lone_document_past_the_vocabulary_is_a_bad_document(tmp_path: Path) -> None:
    """Two documents at least, and most of the unit's, are another tokenizer's: one alone is
    damage (skipped)."""
    corpus = Corpus.open_tokens(_ids_file(tmp_path / "ids.bin", [[65, 9000]]), eot=256)
    assert _skip(corpus) == ([], 1)


def test_half_the_documents_past_the_vocabulary_are_bad_documents(tmp_path: Path) -> None:
    documents = [[65, 9000], [66, 9001], [67], [68]]
    corpus = Corpus.open_tokens(_ids_file(tmp_path / "ids.bin", documents), eot=256)
    with pytest.raises(CorruptDocument):
        list(Loader(corpus, tokenizer="bytes", workers=0, shuffle=False))
    assert _skip(corpus) == ([[67, 256], [68, 256]], 2)


def test_a_bad_document_is_skipped_in_its_own_split_only(tmp_path: Path) -> None:
    """A document of the other split is not this stream's to judge, nor to count."""
    documents = [[65 + k, 66] for k in range(40)]
    documents[7] = [65, 9000]
    corpus = Corpus.open_tokens(_ids_file(tmp_path / "ids.bin", documents), eot=256)
    skips = [_skip(corpus, split=s, val_fraction=0.3)[1] for s in ("train", "val")]
    assert sorted(skips) == [0, 1]


def test_negative_ids_are_damage_never_another_tokenizer(tmp_path: Path) -> None:
    """No tokenizer's ids are below 0 (a signed dtype's): most documents holding them are
    damaged documents, never a ``WrongTokenizer``."""
    documents = [[65, -5] for _ in range(4)] + [[66]]
    path = tmp_path / "ids.bin"
    np.array([i for d in documents for i in (*d, 256)], dtype="<i2").tofile(path)
    corpus = Corpus.open_tokens(path, eot=256, dtype="int16")
    assert _skip(corpus) == ([[66, 256]], 4)


@pytest.mark.parametrize("at", [0, 1])
def test_the_refusal_names_the_document_that_holds_the_end_of_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:  # fmt: skip
    """The end-of-text at the third document's first id, or its second: that document is
    named (the one before ends at its own end-of-text, just before)."""
    from openwebtext import Tokenizer
    from openwebtext.synth import write_corpus

    write_corpus(tmp_path / "c", subsets=1, members=1, docs=5)
    real = Tokenizer.encode_packed
    seen: dict[str, str] = {}

    def with_eot_inside(self, texts):  # type: ignore[no-untyped-def]
        ids, counts = real(self, texts)
        ids = ids.copy()
        ids[counts[0] + counts[1] + at] = self.eot
        seen["text"] = texts[2]
        return ids, counts

    monkeypatch.setattr(Tokenizer, "encode_packed", with_eot_inside)
    loader = Loader(Corpus.open(tmp_path / "c"), tokenizer="bytes", workers=0, shuffle=False)
    with pytest.raises(WrongTokenizer) as caught:
        list(loader)
    monkeypatch.undo()
    documents = list(Loader(Corpus.open(tmp_path / "c"), workers=0, shuffle=False))
    (third,) = [d for d in documents if d.text == seen["text"]]
    assert f"inside document {third.name}:" in str(caught.value)


def test_damage_in_a_split_s_few_documents_is_not_another_tokenizer(tmp_path: Path) -> None:
    """Judged over the unit's documents, whatever the split keeps: two damaged documents of
    30 made "2 of its 3 documents" of the held-out split a ``WrongTokenizer`` (a review)."""
    documents = [[65 + k % 50, 66] for k in range(30)]
    clean = Corpus.open_tokens(_ids_file(tmp_path / "clean.bin", documents), eot=256)
    held = [int(d.name) for d in Loader(clean, tokenizer="bytes", workers=0, split="val",
                                        val_fraction=0.1)]  # fmt: skip
    assert len(held) >= 2
    for k in held[:2]:
        documents[k] = [65, 9000]
    corpus = Corpus.open_tokens(_ids_file(tmp_path / "ids.bin", documents), eot=256)
    got, skipped = _skip(corpus, split="val", val_fraction=0.1)
    assert skipped == 2 and len(got) == len(held) - 2


def test_two_of_three_documents_past_the_vocabulary_are_damage(tmp_path: Path) -> None:
    """Three documents at least, and most of the unit's, are another tokenizer's."""
    corpus = Corpus.open_tokens(_ids_file(tmp_path / "ids.bin", [[65, 9000], [66, 9001], [67]]),
                                eot=256)  # fmt: skip
    assert _skip(corpus) == ([[67, 256]], 2)
