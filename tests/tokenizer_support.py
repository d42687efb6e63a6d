"""What the tokenizer tests share: texts, golden fingerprints, small vocabulary files, and
whether the fast backend is installed."""

from __future__ import annotations

import hashlib
import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from openwebtext.tokenizer.fast import tiktoken_file
from openwebtext.tokenizer.load import cached_load
from openwebtext.tokenizer.reference import load_gpt2

GPT2_EOT = 50256
NON_ASCII = "Grüße aus Köln — naïve café, 東京タワー, Ελληνικά, emoji 🙂👍🏽 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢."
ENGLISH = (
    "The quick brown fox jumps over the lazy dog. It's 2024, and we've got 3.14 reasons "
    "(at least!) to tokenize text:  double  spaces, tabs\tand\nnew lines\n\n"
    "Visit https://example.com/path?q=1 or email someone@example.org. "
)
# Fingerprints are the same on every machine: these are the values of the formula in
# openwebtext/tokenizer/__init__.py's docstring. A change here invalidates saved resume states.
BYTES_FINGERPRINT = "8d316448a5d565ef"
GPT2_FINGERPRINT = "fef9678190ada4e1"

#: The fast backend is installed: its tests run, and "gpt2" must use it.
HAS_SPLINTR = importlib.util.find_spec("splintr") is not None
needs_splintr = pytest.mark.skipif(not HAS_SPLINTR, reason="the fast backend (splintr-rs)")


@pytest.fixture()
def fresh_cache() -> Iterator[None]:
    """An empty per-process tokenizer cache before and after the test."""
    cached_load.cache_clear()
    yield
    cached_load.cache_clear()


def words(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "the", "ing", "é", "ß"]
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def train_bpe(path: Path, special_tokens: list[str]) -> Path:
    """A tiny byte-level BPE trained on a few hundred made-up words, saved as JSON."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    made_up = words(400)
    with pytest.MonkeyPatch.context() as mp:
        # Train serially: no rayon threads in the test process (which later forks).
        mp.setenv("TOKENIZERS_PARALLELISM", "false")
        lines = [" ".join(made_up[i : i + 20]) for i in range(0, len(made_up), 20)]
        tok.train_from_iterator(lines, trainer=trainer)
    tok.save(str(path))
    return path


R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"


def r50k_cache(folder: Path) -> Path:
    """A ``TIKTOKEN_CACHE_DIR`` holding r50k_base's file, written from GPT-2's ranks (r50k_base
    is GPT-2's vocabulary: the file has the hash tiktoken expects), so that
    ``tiktoken:r50k_base`` loads offline."""
    ranks = load_gpt2().ranks
    assert ranks is not None
    content = tiktoken_file(ranks)
    assert hashlib.sha256(content).hexdigest() == R50K_SHA256
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(R50K_URL.encode()).hexdigest()).write_bytes(content)
    return folder


@pytest.fixture(scope="module")
def hf_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-level BPE with <|endoftext|> and <pad> as special tokens."""
    return train_bpe(tmp_path_factory.mktemp("hf") / "bpe.json", ["<|endoftext|>", "<pad>"])


CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"


def cl100k_cache(folder: Path) -> Path:
    """A ``TIKTOKEN_CACHE_DIR`` holding cl100k_base's file, written from the copy of its ranks
    that splintr bundles: the file has the SHA-256 tiktoken expects, so it is the real one."""
    import base64

    import splintr

    bundled = splintr.Tokenizer.from_pretrained("cl100k_base")
    content = b"".join(
        base64.b64encode(bundled.decode_token_bytes(i)) + b" %d\n" % i for i in range(100256)
    )
    assert hashlib.sha256(content).hexdigest() == CL100K_SHA256
    folder.mkdir(parents=True, exist_ok=True)
    (folder / hashlib.sha1(CL100K_URL.encode()).hexdigest()).write_bytes(content)
    return folder
