"""The loaded ``Tokenizer`` and ``load_tokenizer``, which picks its backend: the fast one where
it is installed and passes the exactness check in this process, else the reference.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from openwebtext.tokenizer.exactness import first_difference
from openwebtext.tokenizer.fast import FAST_BACKEND, NOT_INSTALLED, fast_backend
from openwebtext.tokenizer.reference import load_bytes, load_gpt2, load_hf, load_tiktoken
from openwebtext.tokenizer.spec import (
    Backend,
    EncodeU32,
    Request,
    TokenizerError,
    TokenizerWarning,
    Vocabulary,
    parse_spec,
    token_dtype,
)

__all__ = ["Tokenizer", "cached_load", "load_tokenizer"]


class Tokenizer:
    """A loaded tokenizer: ``encode`` text to ids, with the facts the loader needs about them.

    Get one with ``load_tokenizer(spec)``; treat its attributes as read-only (it is shared
    through the per-process cache).

    Attributes:
        spec: The vocabulary's spec, normalised and without a backend (``"gpt2"``,
            ``"hf:tok.json"``): the same whichever backend encodes, so that files and states
            made with one are taken by the other.
        backend: What encodes: ``"splintr"`` (the fast backend), ``"tiktoken"`` or
            ``"tokenizers"`` (the references), ``"openwebtext"`` (``bytes``).
        eot: The end-of-text id, which the loader appends after every document.
        n_vocab: Every id is below it.
        dtype: ``uint16`` if ``n_vocab <= 65536``, else ``uint32``.
        fingerprint: 16 hex digits naming the vocabulary (see the package's docstring);
            the same for the same spec and files on any machine, with any backend.
    """

    __slots__ = (
        "_decode",
        "_encode",
        "_encode_u32",
        "_eot_u32",
        "_request",
        "backend",
        "dtype",
        "eot",
        "fingerprint",
        "n_vocab",
        "spec",
    )

    spec: str
    backend: str
    eot: int
    n_vocab: int
    dtype: np.dtype[np.unsignedinteger[Any]]
    fingerprint: str

    def __init__(
        self,
        spec: str,
        *,
        eot: int,
        n_vocab: int,
        fingerprint: str,
        encode: Callable[[str], list[int]],
        decode: Callable[[Sequence[int]], str],
        backend: str = "custom",
        encode_u32: EncodeU32 | None = None,
        request: str | None = None,
    ) -> None:
        if not 0 <= eot < n_vocab:
            raise TokenizerError(f"tokenizer {spec!r}: end-of-text id {eot} is not below {n_vocab}")
        self.spec = spec
        self.backend = backend
        self.eot = eot
        self.n_vocab = n_vocab
        self.dtype = token_dtype(n_vocab)
        self.fingerprint = fingerprint
        self._encode = encode
        self._encode_u32 = encode_u32
        self._eot_u32 = np.array([eot], dtype="<u4").tobytes()
        self._decode = decode
        self._request = spec if request is None else request

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` as ordinary text (special tokens' text too), without an eot.

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, not {type(text).__name__}")
        return self._encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[self.encode(t) for t in texts]``, in this thread (it never starts threads).

        Raises:
            TypeError: ``texts`` is one ``str`` (not a sequence of them), or holds another type.
        """
        if isinstance(texts, str):
            raise TypeError("encode_batch: texts must be a sequence of str, not one str")
        encode = self.encode
        return [encode(text) for text in texts]

    def encode_packed(self, texts: Sequence[str]) -> tuple[npt.NDArray[Any], list[int]]:
        """Every text's ids followed by ``eot``, in order, as one array of ``dtype``; and the
        number of ids of each text, its eot included. In this thread, like ``encode_batch``.

        The same ids as ``encode``, without a Python int per id where the backend can hand
        them over as a buffer (the fast backend and tiktoken can): 2x less CPU than building
        the array from ``encode_batch``'s lists with the fast backend.
        """
        counts: list[int] = []
        encode_u32 = self._encode_u32
        if encode_u32 is None:
            flat: list[int] = []
            eot = self.eot
            for ids in self.encode_batch(texts):
                flat += ids
                flat.append(eot)
                counts.append(len(ids) + 1)
            return np.array(flat, dtype=self.dtype), counts
        parts: list[Any] = []
        eot_u32 = self._eot_u32
        for text in texts:
            ids_u32 = encode_u32(text)
            parts.append(ids_u32)
            parts.append(eot_u32)
            counts.append((memoryview(ids_u32).nbytes >> 2) + 1)
        joined = np.frombuffer(b"".join(parts), dtype="<u4")
        return joined.astype(self.dtype, copy=joined.dtype != self.dtype), counts

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (invalid UTF-8 replaced by U+FFFD); eot decodes as its name.

        Raises:
            ValueError: an id is not an int from 0 below ``n_vocab`` (named).
        """
        given = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids))
        fast = given.ndim == 1 and given.dtype.kind in "iu"  # (else: bools, floats, huge ints)
        if not fast or (given.size and not 0 <= given.min() <= given.max() < self.n_vocab):
            bad = [i for i in given.ravel().tolist() if isinstance(i, bool)
                   or not isinstance(i, int) or not 0 <= i < self.n_vocab]  # fmt: skip
            if bad or given.ndim != 1:
                raise ValueError(f"decode: {(bad or [ids])[0]!r} is no id of this tokenizer "
                                 f"(an int from 0 below {self.n_vocab})")  # fmt: skip
        return self._decode(given.tolist())

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self._request!r}, backend={self.backend!r}, eot={self.eot}, "
            f"n_vocab={self.n_vocab}, dtype={self.dtype.name}, fingerprint={self.fingerprint!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # The spec asked for, not the backend chosen: the receiving process chooses (and
        # checks) again.
        return (load_tokenizer, (self._request,))


def load_tokenizer(spec: str) -> Tokenizer:
    """Load the tokenizer that ``spec`` names (see the package's docstring); cached per process.

    Raises:
        TokenizerError: Unknown spec, a missing extra (from the clone: ``pip install -e
            '.[tokenize]'``), an unreadable or unsuitable file, a tiktoken encoding that cannot
            be downloaded, or ``@splintr`` where splintr is missing or fails the exactness check.
    Warns:
        TokenizerWarning: Once per process and spec: the fast backend gave other ids than the
            reference on a hard string (named); the reference is used.
    """
    return cached_load(parse_spec(spec))


@functools.cache
def cached_load(request: Request) -> Tokenizer:
    """``load_tokenizer`` of a parsed spec, once per process (``cache_clear()`` in tests)."""
    vocabulary = _vocabulary(request.spec)
    backend = _choose(request, vocabulary)
    return Tokenizer(
        vocabulary.spec,
        eot=vocabulary.eot,
        n_vocab=vocabulary.n_vocab,
        fingerprint=vocabulary.fingerprint,
        encode=backend.encode,
        decode=vocabulary.reference.decode,  # decoding is rare: always the reference's
        backend=backend.name,
        encode_u32=backend.encode_u32,
        request=request.text,
    )


def _vocabulary(spec: str) -> Vocabulary:
    if spec == "bytes":
        return load_bytes()
    if spec == "gpt2":
        return load_gpt2()
    if spec.startswith("tiktoken:"):
        return load_tiktoken(spec, spec[len("tiktoken:") :])
    if spec.startswith("hf:"):
        return load_hf(spec, spec[len("hf:") :])
    raise AssertionError(f"unnormalised spec {spec!r}")  # pragma: no cover


def _choose(request: Request, vocabulary: Vocabulary) -> Backend:
    """The fast backend if asked for or installed, and exact here; else the reference."""
    reference = vocabulary.reference
    if request.backend == reference.name or vocabulary.spec == "bytes":
        return reference
    forced = request.backend == FAST_BACKEND
    fast, why_not = fast_backend(vocabulary)
    if fast is None:
        message = f"tokenizer {request.text!r}: {why_not}"
        if forced:
            raise TokenizerError(message)
        if why_not != NOT_INSTALLED:  # installed, but not for this vocabulary: said once
            _fall_back(message, reference)
        return reference
    difference = first_difference(fast, reference, vocabulary.extra_strings)
    if difference is None:
        return fast
    cls, text, what = difference
    shown = repr(text) if len(text) <= 60 else f"{text[:60]!r}... ({len(text)} characters)"
    message = (
        f"tokenizer {request.text!r}: {fast.name} does not give {reference.name}'s ids for the "
        f"hard string {shown} ({cls}): {what}"
    )
    if forced:
        raise TokenizerError(message)
    _fall_back(message, reference)
    return reference


def _fall_back(message: str, reference: Backend) -> None:
    warnings.warn(
        f"{message}; using {reference.name} (the reference) in this process",
        TokenizerWarning,
        stacklevel=5,  # load_tokenizer's caller
    )
