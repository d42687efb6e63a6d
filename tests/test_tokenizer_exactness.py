"""The fast backend gives the reference's ids: where installed it is used, it agrees on random
hard text and on a generated corpus, and a backend that disagrees is caught by the check."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openwebtext.tokenizer import Tokenizer, TokenizerError, TokenizerWarning, load_tokenizer
from openwebtext.tokenizer import load as load_module
from openwebtext.tokenizer.exactness import first_difference, hard_strings
from openwebtext.tokenizer.fast import greedy_pattern
from openwebtext.tokenizer.reference import load_gpt2
from openwebtext.tokenizer.spec import Backend, Vocabulary
from tokenizer_support import (
    ENGLISH,
    GPT2_FINGERPRINT,
    HAS_SPLINTR,
    NON_ASCII,
    cl100k_cache,
    fresh_cache,
    hf_file,
    needs_splintr,
    r50k_cache,
)

__all__ = ["fresh_cache", "hf_file"]  # fixtures


def test_the_fast_backend_is_used_where_installed(hf_file: Path) -> None:
    """The suite fails if splintr is installed but "gpt2" silently encodes with tiktoken."""
    if not HAS_SPLINTR:
        pytest.skip("splintr-rs is not installed: the references encode")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the suite's filter does it too: no quiet fallback)
        assert load_tokenizer("gpt2").backend == "splintr"
        assert load_tokenizer("tiktoken:gpt2").backend == "splintr"
        assert load_tokenizer(f"hf:{hf_file}").backend == "splintr"
        assert load_tokenizer("gpt2@splintr") is not load_tokenizer("gpt2")


# ---------------------------------------------------------------- identity

_CLASS_FRAGMENTS = [text for _, text in hard_strings() if len(text) <= 40]
_SPACES = " \t\n\r\x0b\x0c\u00a0\u1680\u2000\u2003\u2009\u200a\u2028\u2029\u202f\u205f\u3000\u0085"
_EMOJI = ["🙂", "👍🏽", "\u200d", "\ufe0f", "👨‍👩‍👧", "🇫🇷", "1️⃣", "🏳️‍🌈", "\U0001f3fb"]
_CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'LL", "'"]

_fragment = st.one_of(
    st.sampled_from(_CLASS_FRAGMENTS),
    st.builds(lambda ch, n: ch * n, st.sampled_from(_SPACES), st.integers(1, 3000)),
    st.text(st.sampled_from(_SPACES), max_size=12),
    st.sampled_from(_CONTRACTIONS),
    st.text("0123456789٠١٢٣٤٥٦٧٨٩۰۱۲۳१२३１２", max_size=14),
    st.text(st.characters(categories=["L", "M", "N"]), max_size=12),
    st.text(st.characters(categories=["Lo"], min_codepoint=0x3000), max_size=12),  # CJK, Hangul
    st.sampled_from(_EMOJI),
    st.sampled_from(["\r\n", "\ufeff", "\u200b", "\u00ad", "\x00", "\x1b", "\x7f", "\x85"]),
    st.just("<|endoftext|>"),
    st.sampled_from(["ﬁ", "ﬂ", "ǅ", "ẞ", "İ", "\u0301", "\u0308", "𝔘", "𝟘", "\U000e0041"]),
    st.text(st.characters(exclude_categories=()), max_size=8),  # anything, surrogates too
)
_texts = st.lists(_fragment, max_size=24).map("".join)


@pytest.fixture(scope="module")
def pair() -> tuple[Tokenizer, Tokenizer]:
    return load_tokenizer("gpt2@splintr"), load_tokenizer("gpt2@tiktoken")


@needs_splintr
@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_texts, min_size=1, max_size=4))
def test_fast_ids_are_tiktokens_on_hard_text(
    pair: tuple[Tokenizer, Tokenizer], texts: list[str]
) -> None:
    fast, reference = pair
    for text in texts:
        assert fast.encode(text) == reference.encode(text)
    ids, counts = fast.encode_packed(texts)
    expected, expected_counts = reference.encode_packed(texts)
    assert ids.dtype == expected.dtype == np.uint16
    assert ids.tolist() == expected.tolist()
    assert counts == expected_counts


@needs_splintr
def test_fast_ids_are_tiktokens_on_a_generated_corpus(
    pair: tuple[Tokenizer, Tokenizer], small_docs: dict[str, str]
) -> None:
    fast, reference = pair
    texts = list(small_docs.values())
    for text in texts:
        assert fast.encode(text) == reference.encode(text)
    ids, counts = fast.encode_packed(texts)
    assert ids.tolist() == [i for t in texts for i in (*reference.encode(t), reference.eot)]
    assert counts == [len(reference.encode(t)) + 1 for t in texts]
    assert sum(counts) > 100_000 // 4  # a corpus, not a handful of ids


def test_encode_packed_is_encode_with_eots(hf_file: Path) -> None:
    texts = [ENGLISH, "", NON_ASCII, "one<|endoftext|>two", "a\ud800b"]
    for spec in ("bytes", "gpt2", "gpt2@tiktoken", f"hf:{hf_file}", f"hf:{hf_file}@tokenizers"):
        tok = load_tokenizer(spec)
        ids, counts = tok.encode_packed(texts)
        assert ids.dtype == tok.dtype
        assert ids.tolist() == [i for t in texts for i in (*tok.encode(t), tok.eot)], spec
        assert counts == [len(tok.encode(t)) + 1 for t in texts]
        empty, none = tok.encode_packed([])
        assert (empty.tolist(), none, empty.dtype) == ([], [], tok.dtype)


@needs_splintr
def test_an_hf_file_with_a_template_stays_with_tokenizers(tmp_path: Path, hf_file: Path) -> None:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import processors

    templated = HFTokenizer.from_file(str(hf_file))
    templated.add_special_tokens(["[CLS]", "[SEP]"])
    ids = [(name, templated.token_to_id(name)) for name in ("[CLS]", "[SEP]")]
    templated.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=ids
    )
    path = tmp_path / "templated.json"
    templated.save(str(path))
    with pytest.warns(TokenizerWarning, match="splintr does not give tokenizers's ids"):
        tok = load_tokenizer(f"hf:{path}")
    assert tok.backend == "tokenizers"
    assert tok.encode("kalo mine") == templated.encode("kalo mine", add_special_tokens=False).ids


# ---------------------------------------------------------------- tiktoken:NAME


@needs_splintr
def test_tiktoken_names_use_the_fast_backend_where_it_is_exact(
    fresh_cache: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(r50k_cache(tmp_path / "tiktoken")))
    r50k = load_tokenizer("tiktoken:r50k_base")
    reference = load_tokenizer("tiktoken:r50k_base@tiktoken")
    assert (r50k.backend, reference.backend) == ("splintr", "tiktoken")
    assert r50k.fingerprint == reference.fingerprint == GPT2_FINGERPRINT  # GPT-2's vocabulary
    for text in (ENGLISH, NON_ASCII, " \u3000 x  \n\n"):
        assert r50k.encode(text) == reference.encode(text) == load_tokenizer("gpt2").encode(text)


@needs_splintr
def test_cl100k_base_uses_the_fast_backend(
    fresh_cache: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_docs: dict[str, str]
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cl100k_cache(tmp_path / "tiktoken")))
    cl100k = load_tokenizer("tiktoken:cl100k_base")
    reference = load_tokenizer("tiktoken:cl100k_base@tiktoken")
    assert (cl100k.backend, reference.backend, cl100k.dtype.name) == (
        "splintr",
        "tiktoken",
        "uint32",
    )
    assert cl100k.fingerprint == reference.fingerprint
    texts = [ENGLISH, NON_ASCII, *list(small_docs.values())[:30]]
    for text in texts:
        assert cl100k.encode(text) == reference.encode(text)
    assert cl100k.encode_packed(texts)[0].tolist() == reference.encode_packed(texts)[0].tolist()


@needs_splintr
@pytest.mark.parametrize("split", ["r50k_base", "cl100k_base"])
def test_a_split_splintr_lacks_is_compiled_from_tiktokens_pattern(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, split: str
) -> None:
    """An encoding of a name the fast backend does not know: its possessive pattern made
    greedy, then checked like any other (here GPT-2's ranks under r50k's and cl100k's split)."""
    import tiktoken
    from tiktoken_ext import openai_public

    gpt2 = load_tokenizer("gpt2@tiktoken")
    ranks = load_gpt2().ranks
    if split == "r50k_base" and not hasattr(openai_public, "r50k_pat_str"):
        pytest.skip("tiktoken before 0.8 writes r50k's pattern inside gpt2()")
    pattern = (
        openai_public.r50k_pat_str
        if split == "r50k_base"
        else (
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++"""
            r"""[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        )
    )
    assert "++" in pattern
    encoding = tiktoken.Encoding(
        name=f"custom_{split}",
        pat_str=pattern,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": gpt2.eot},
    )
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: encoding)
    tok = load_tokenizer(f"tiktoken:custom_{split}")
    assert tok.backend == "splintr"
    for text in (ENGLISH, NON_ASCII, "it'S 12345 \r\n\r\n  x"):
        assert tok.encode(text) == encoding.encode_ordinary(text)


@pytest.mark.parametrize(
    ("pattern", "greedy"),
    [
        (r"\p{L}++|\p{N}{1,3}+|x?+|y*+", r"\p{L}+|\p{N}{1,3}|x?|y*"),
        (r"[^\r\n\p{L}\p{N}]?+\p{L}++", r"[^\r\n\p{L}\p{N}]?\p{L}+"),
        (r"\++ [+*]+ (?:ab)++ a+? (?i:x)", r"\++ [+*]+ (?:ab)+ a+? (?i:x)"),
        (r"'s|'t| ?\p{L}+|\s+(?!\S)|\s+", r"'s|'t| ?\p{L}+|\s+(?!\S)|\s+"),
    ],
)
def test_greedy_pattern(pattern: str, greedy: str) -> None:
    assert greedy_pattern(pattern) == greedy


# ---------------------------------------------------------------- the check catches


def _wrong_for(reference: Backend, needle: str, *, u32_only: bool = False) -> Backend:
    """The reference's calls, but one id off on every text that holds ``needle``."""

    def encode(text: str) -> list[int]:
        ids = reference.encode(text)
        return [*ids, 0] if needle in text else ids

    def encode_u32(text: str) -> Any:
        return np.array(encode(text), dtype="<u4").tobytes()

    return Backend("splintr", reference.encode if u32_only else encode, reference.decode,
                   encode_u32)  # fmt: skip


def _first_with(needle: str) -> str:
    return next(text for _, text in hard_strings() if needle in text)


@pytest.mark.parametrize("u32_only", [False, True])
def test_a_wrong_fast_backend_warns_once_and_the_reference_encodes(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch, u32_only: bool
) -> None:
    def wrong(vocabulary: Vocabulary) -> tuple[Backend | None, str]:
        return _wrong_for(vocabulary.reference, "\u3000", u32_only=u32_only), ""

    monkeypatch.setattr(load_module, "fast_backend", wrong)
    first = _first_with("\u3000")
    with pytest.warns(TokenizerWarning) as caught:
        tok = load_tokenizer("gpt2")
        assert load_tokenizer("gpt2") is tok  # one warning per process: the load is cached
    assert len(caught) == 1
    message = str(caught[0].message)
    assert repr(first)[:40] in message and "Unicode spaces" in message
    assert ("encode_u32 gave" if u32_only else "encode gave") in message
    assert "using tiktoken" in message
    assert tok.backend == "tiktoken"
    assert tok.encode("a\u3000b") == load_tokenizer("gpt2@tiktoken").encode("a\u3000b")
    with pytest.raises(TokenizerError, match="does not give tiktoken's ids"):
        load_tokenizer("gpt2@splintr")


def test_a_failing_fast_backend_is_a_difference(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Panic(BaseException):  # what a Rust panic raises through PyO3
        pass

    def panics(text: str) -> list[int]:
        raise Panic("attempt to subtract with overflow")

    def failing(vocabulary: Vocabulary) -> tuple[Backend | None, str]:
        return Backend("splintr", panics, vocabulary.reference.decode), ""

    monkeypatch.setattr(load_module, "fast_backend", failing)
    with pytest.warns(TokenizerWarning, match="it failed: Panic: attempt to subtract"):
        assert load_tokenizer("gpt2").backend == "tiktoken"


def test_a_fast_backend_that_cannot_load_warns(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cannot(vocabulary: Vocabulary) -> tuple[Backend | None, str]:
        return None, "splintr cannot load it: ValueError: possessive quantifiers"

    monkeypatch.setattr(load_module, "fast_backend", cannot)
    with pytest.warns(TokenizerWarning, match="possessive quantifiers; using tiktoken"):
        assert load_tokenizer("gpt2").backend == "tiktoken"
    with pytest.raises(TokenizerError, match="possessive quantifiers"):
        load_tokenizer("gpt2@splintr")


def test_first_difference_also_reads_the_extra_strings() -> None:
    reference = load_tokenizer("gpt2@tiktoken")
    backend = Backend("tiktoken", reference.encode, reference.decode)
    assert first_difference(backend, backend) is None
    wrong = _wrong_for(backend, "<pad-not-in-hard-strings>")
    assert first_difference(wrong, backend) is None
    cls, text, _ = first_difference(wrong, backend, ["x <pad-not-in-hard-strings>"]) or ("",) * 3
    assert (cls, text) == ("the vocabulary's own", "x <pad-not-in-hard-strings>")


def test_without_splintr_the_reference_encodes_quietly(
    fresh_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "splintr", None)  # makes `import splintr` fail
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_tokenizer("gpt2").backend == "tiktoken"
    with pytest.raises(TokenizerError, match=r"splintr is not installed \(pip install splintr"):
        load_tokenizer("gpt2@splintr")
