"""The fingerprint that names a vocabulary: of its id -> bytes table (bytes, gpt2,
tiktoken:NAME) or of its file (hf:PATH); the formula is in the package's docstring.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

__all__ = ["file_fingerprint", "table_fingerprint"]


def table_fingerprint(n_vocab: int, eot: int, token_bytes: Callable[[int], bytes | None]) -> str:
    """The fingerprint of an id -> bytes table (``None``: an id without bytes)."""
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


def file_fingerprint(content: bytes) -> str:
    """The fingerprint of a vocabulary file: its bytes."""
    return hashlib.sha256(content).hexdigest()[:16]
