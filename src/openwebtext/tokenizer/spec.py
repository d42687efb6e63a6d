"""What names and makes up a tokenizer: the spec strings (parsed by ``parse_spec``), the
vocabulary's facts, a backend's encode and decode calls, the dtype of ids, the errors and the
warning. The ``Tokenizer`` that joins them is in ``load``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openwebtext.errors import OWTError

__all__ = [
    "BACKENDS",
    "SPECS",
    "Backend",
    "EncodeU32",
    "Request",
    "TokenizerError",
    "TokenizerWarning",
    "Vocabulary",
    "as_valid_text",
    "parse_spec",
    "token_dtype",
]

#: The accepted spec forms, for messages and help texts.
SPECS = ("bytes", "gpt2", "tiktoken:NAME", "hf:PATH")

#: The backends a spec may name after an ``@``: the two references and the fast one.
BACKENDS = ("tiktoken", "tokenizers", "splintr")


# A text's ids as little-endian uint32, in any object with the buffer protocol (bytes, an
# array): what the fast paths of ``encode_packed`` join without making Python ints.
EncodeU32 = Callable[[str], Any]


class TokenizerError(OWTError):
    """A tokenizer spec that cannot be loaded: unknown, a missing extra, a bad file, no network.
    Never a skip under ``on_error="skip"`` (the options' fault: every unit would be one)."""

    skippable = False


class TokenizerWarning(UserWarning):
    """The fast backend gave other ids than the reference: the reference is used instead."""


def token_dtype(n_vocab: int) -> np.dtype[np.unsignedinteger[Any]]:
    """The narrowest array dtype for ids below ``n_vocab``: uint16 up to 65536 ids, else uint32."""
    if n_vocab <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.uint32)


@dataclass(frozen=True)
class Backend:
    """One library's calls for one vocabulary: ``encode`` (ordinary text, no eot), the same ids
    as little-endian uint32 in a buffer (``encode_u32``, where the library can), ``decode``."""

    name: str
    encode: Callable[[str], list[int]]
    decode: Callable[[Sequence[int]], str]
    encode_u32: EncodeU32 | None = None


@dataclass(frozen=True)
class Vocabulary:
    """A loaded vocabulary with its reference backend, and what a fast backend is built from.

    ``ranks`` and ``pattern``: a byte-level BPE as tiktoken holds it (token bytes -> rank, and
    the split regex); ``pattern_name``: a name of a known split (``"gpt2"``, ``"cl100k_base"``)
    that a fast backend may have built in. ``hf_json``: a Hugging Face tokenizer.json's bytes.
    ``extra_strings``: texts the exactness check adds to the shipped ones (e.g. the file's own
    added tokens).
    """

    spec: str
    eot: int
    n_vocab: int
    fingerprint: str
    reference: Backend
    ranks: dict[bytes, int] | None = None
    pattern: str = ""
    pattern_name: str = ""
    hf_json: bytes | None = None
    extra_strings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """A parsed spec: the vocabulary (``spec``) and the backend asked for (``""``: the fastest
    exact one installed)."""

    spec: str
    backend: str = ""

    @property
    def text(self) -> str:
        """The spec string that loads this again (what a ``Tokenizer`` pickles as)."""
        return f"{self.spec}@{self.backend}" if self.backend else self.spec


def parse_spec(spec: str) -> Request:
    """The normalised vocabulary and backend of ``spec`` (grammar: the package's docstring)."""
    if not isinstance(spec, str):
        raise TokenizerError(f"a tokenizer spec is a string, not {type(spec).__name__}")
    text = spec.strip()
    backend = ""
    head, at, tail = text.rpartition("@")
    if at and tail.strip().lower() in BACKENDS:
        text, backend = head.strip(), tail.strip().lower()
    lower = text.lower()
    if lower in ("bytes", "gpt2"):
        vocabulary = lower
    elif lower.startswith("tiktoken:"):
        name = text[len("tiktoken:") :].strip()
        if not name:
            raise TokenizerError(f"tokenizer spec {spec!r} names no tiktoken encoding")
        vocabulary = "gpt2" if name.lower() == "gpt2" else f"tiktoken:{name}"
    elif lower.startswith("hf:"):
        path = text[len("hf:") :].strip()
        if not path:
            raise TokenizerError(f"tokenizer spec {spec!r} names no file")
        vocabulary = f"hf:{path}"
    else:
        accepted = ", ".join(repr(s) for s in SPECS)
        raise TokenizerError(
            f"unknown tokenizer spec {spec!r}: expected one of {accepted} "
            "(e.g. 'tiktoken:cl100k_base', 'hf:tokenizer.json'), optionally followed by "
            "'@tiktoken' or '@tokenizers' (the reference) or '@splintr' (the fast backend)"
        )
    if backend and vocabulary == "bytes":
        raise TokenizerError(f"tokenizer spec {spec!r}: 'bytes' has one backend, name none")
    reference = "tokenizers" if vocabulary.startswith("hf:") else "tiktoken"
    if backend not in ("", "splintr", reference):
        raise TokenizerError(
            f"tokenizer spec {spec!r}: {vocabulary!r} is encoded by {reference!r} (the "
            f"reference) or 'splintr', not {backend!r}"
        )
    return Request(vocabulary, backend)


def as_valid_text(text: str) -> str:
    """``text`` with lone surrogates (not valid in UTF-8) replaced by U+FFFD, as tiktoken does:
    what every backend encodes in place of a text that has them."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
