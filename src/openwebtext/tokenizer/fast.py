"""The fast backend: splintr-rs (Rust BPE, ~4x less CPU than tiktoken on GPT-2), built from
exactly what the reference holds (tiktoken's ranks and split, or the tokenizer.json's bytes).

Only its one-text calls are used (``encode_ordinary``, ``encode_flat``): they run in the
calling thread. Its batch calls start a Rayon thread pool, after which a forked child that
encodes hangs; they are never called. Whether its ids are right is not assumed here: the
``exactness`` check decides before it is used.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from openwebtext.tokenizer.spec import Backend, Vocabulary, as_valid_text

__all__ = ["FAST_BACKEND", "NOT_INSTALLED", "fast_backend", "greedy_pattern", "tiktoken_file"]

#: The fast backend's name (its import name; ``@splintr`` in a spec).
FAST_BACKEND = "splintr"
#: Why there is no fast backend when splintr is not installed (the one quiet reason).
NOT_INSTALLED = "splintr is not installed (pip install splintr-rs)"

# A split that splintr has built in (faster than the same split compiled from tiktoken's
# pattern: 0.47 s vs 0.79 s over the same 10 members of GPT-2 text), by the name that
# ``Vocabulary.pattern_name`` gives it, and the splintr constant that holds it.
_BUILT_IN_SPLITS = {
    "gpt2": "GPT2_PATTERN",
    "cl100k_base": "CL100K_BASE_PATTERN",
    "o200k_base": "O200K_BASE_PATTERN",
}


def _import_splintr() -> Any:
    try:
        import splintr
    except ImportError:
        return None
    return splintr


def tiktoken_file(ranks: dict[bytes, int]) -> bytes:
    """``ranks`` in tiktoken's file format: ``base64(token) rank`` lines, by rank."""
    lines = sorted(ranks.items(), key=lambda item: item[1])
    return b"".join(base64.b64encode(token) + b" %d\n" % rank for token, rank in lines)


def greedy_pattern(pattern: str) -> str:
    """``pattern`` with possessive quantifiers (``++``, ``*+``, ``?+``, ``}+``) made greedy.

    splintr's regex engine does not backtrack and refuses possessive quantifiers; over
    tiktoken's split patterns the greedy form matches the same (the exactness check is what
    proves it for a given vocabulary). Escapes and character classes are left as they are.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = quantified = False  # inside [...]; the last item was a quantifier
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            j = i + 2
            if pattern[i + 1 : i + 2] in ("p", "P", "x") and pattern[j : j + 1] == "{":
                j = pattern.find("}", j) + 1 or n
            out.append(pattern[i:j])
            i, quantified = j, False
            continue
        if in_class:
            in_class, quantified = ch != "]", False
        elif ch == "+" and quantified:  # possessive: dropped
            i, quantified = i + 1, False
            continue
        elif ch == "[":
            in_class, quantified = True, False
        elif ch == "?" and quantified:  # lazy: kept, and no quantifier follows it
            quantified = False
        else:
            quantified = ch in "+*}" or (ch == "?" and out[-1:] != ["("])
        out.append(ch)
        i += 1
    return "".join(out)


def _with_valid_text(call: Callable[[str], Any]) -> Callable[[str], Any]:
    """``call``, retried on the text with lone surrogates replaced (PyO3 cannot take them)."""

    def encode(text: str) -> Any:
        try:
            return call(text)
        except UnicodeEncodeError:
            return call(as_valid_text(text))

    return encode


def _from_ranks(splintr: Any, vocabulary: Vocabulary) -> tuple[Backend | None, str]:
    assert vocabulary.ranks is not None
    built_in = _BUILT_IN_SPLITS.get(vocabulary.pattern_name, "")
    pattern = getattr(splintr, built_in, None) if built_in else None
    if not isinstance(pattern, str):
        pattern = greedy_pattern(vocabulary.pattern)
    try:
        tok = splintr.Tokenizer.from_bytes(tiktoken_file(vocabulary.ranks), pattern)
    except Exception as exc:  # ValueError for a pattern its regex engine cannot compile
        return None, f"splintr cannot load it: {type(exc).__name__}: {exc}"
    # No special tokens are given to it, so even its encode_flat cannot match one.
    encode = _with_valid_text(tok.encode_ordinary)
    return Backend(FAST_BACKEND, encode, tok.decode, _with_valid_text(tok.encode_flat)), ""


def _from_hf_json(splintr: Any, content: bytes) -> tuple[Backend | None, str]:
    try:
        tok = splintr.from_json_bytes(content)
    except Exception as exc:
        return None, f"splintr cannot load the file: {type(exc).__name__}: {exc}"
    # encode_ordinary: special tokens' text as text. (Its encode_flat matches them: not used.)
    return Backend(FAST_BACKEND, _with_valid_text(tok.encode_ordinary), tok.decode), ""


def fast_backend(vocabulary: Vocabulary) -> tuple[Backend | None, str]:
    """The fast backend for ``vocabulary``, unchecked, or ``None`` and why there is none."""
    splintr = _import_splintr()
    if splintr is None:
        return None, NOT_INSTALLED
    if vocabulary.ranks is not None:
        return _from_ranks(splintr, vocabulary)
    if vocabulary.hf_json is not None:
        return _from_hf_json(splintr, vocabulary.hf_json)
    return None, f"splintr does not encode {vocabulary.spec!r}"
