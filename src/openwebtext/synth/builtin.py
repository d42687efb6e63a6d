"""The two built-in corpora, each generated once into the cache folder: the default corpus
(:func:`default_corpus`: what a command given no path reads) and the bench corpus
(:func:`bench_corpus`: what ``owt bench`` and ``benchmarks/`` measure on), their folders, and
``paths_or_default`` (the given paths, or one of them)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from openwebtext.files import cache_root
from openwebtext.synth.pack import COMPLETE_MARKER, GENERATOR_VERSION, write_corpus

__all__ = [
    "DEFAULT_DOCS",
    "DEFAULT_MEMBERS",
    "DEFAULT_SEED",
    "DEFAULT_SUBSETS",
    "bench_corpus",
    "bench_corpus_path",
    "corpus_dirname",
    "default_corpus",
    "default_corpus_path",
    "paths_or_default",
]

# The bench corpus: 3 subsets x 60 members x 390 documents (70,200 documents, 335 MB of text,
# 108 MB of xz), the corpus docs/benchmarks.md and FACTS measure on, and ``owt synth``'s
# default shape.
DEFAULT_SUBSETS = 3
DEFAULT_MEMBERS = 60
DEFAULT_DOCS = 390
DEFAULT_SEED = 0

#: (subsets, members, docs, seed) of the default corpus: 1 x 30 x 390 (11,700 documents,
#: 55 MB of text). Making a member costs ~4.7 ms of CPU per document, 85% of it xz at
#: preset 6 (which the bytes depend on), so 30 members take ~55 CPU seconds: under half a
#: minute on two idle cores. Tests patch this.
_DEFAULT_SHAPE: tuple[int, int, int, int] = (1, 30, DEFAULT_DOCS, DEFAULT_SEED)

#: ... and of the bench corpus.
_BENCH_SHAPE: tuple[int, int, int, int] = (
    DEFAULT_SUBSETS,
    DEFAULT_MEMBERS,
    DEFAULT_DOCS,
    DEFAULT_SEED,
)

#: Mean document size used for the size announced before generating: that of the default
#: corpus (335,127,897 bytes of text in 70,200 documents), so it is announced as 335 MB.
_MEAN_DOC_BYTES = 4774
#: The text of the two built-in corpora, measured (the sum of the documents' UTF-8 bytes):
#: announced as 55 MB and 335 MB, the numbers the README and the docs give.
_TEXT_BYTES = {(1, 30, 390, 0): 54_942_527, (3, 60, 390, 0): 335_127_897}


def corpus_dirname(subsets: int, members: int, docs: int, seed: int) -> str:
    """Cache folder name for a corpus, e.g. ``synth-v1-s3-m60-d390-seed0``."""
    return f"synth-v{GENERATOR_VERSION}-s{subsets}-m{members}-d{docs}-seed{seed}"


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (a no-op where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path, "a", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process to finish {path.stem} ...", file=sys.stderr)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def default_corpus_path(cache_dir: Path | None = None) -> Path:
    """The folder :func:`default_corpus` uses, whether or not it was generated yet.

    Args:
        cache_dir: the cache folder; default :func:`openwebtext.files.cache_root`.

    Returns:
        ``cache_dir / corpus_dirname(1, 30, 390, 0)``; it holds the corpus once
        ``path / COMPLETE_MARKER`` exists. ``owt synth --where`` prints it.
    """
    return _shape_path(_DEFAULT_SHAPE, cache_dir)


def bench_corpus_path(cache_dir: Path | None = None) -> Path:
    """The folder :func:`bench_corpus` uses (``corpus_dirname(3, 60, 390, 0)``)."""
    return _shape_path(_BENCH_SHAPE, cache_dir)


def default_corpus(cache_dir: Path | None = None, *, progress: bool = True) -> Path:
    """Return the built-in default corpus, generating it the first time.

    What a command given no path reads: 1 subset x 30 members x 390 documents, seed 0
    (11,700 documents, 55 MB of text), in :func:`default_corpus_path`. Generation takes
    about 55 CPU seconds, 85% of them in xz (preset 6, which the corpus's bytes depend on):
    under half a minute on two idle cores. It happens once; later calls return at once.
    Concurrent callers (processes) wait for each other and never see a partial corpus.

    Args:
        cache_dir: where to keep it; default :func:`openwebtext.files.cache_root`.
        progress: show a progress bar while generating.

    Returns:
        The corpus folder (holding ``urlsf_subset00.tar``).
    """
    return _built_in(_DEFAULT_SHAPE, "default corpus", cache_dir, progress)


def bench_corpus(cache_dir: Path | None = None, *, progress: bool = True) -> Path:
    """Return the built-in bench corpus, generating it the first time.

    What ``owt bench`` with no path and ``benchmarks/`` measure on: 3 subsets x 60 members
    x 390 documents, seed 0 (70,200 documents, 335 MB of text, 108 MB of xz), in
    :func:`bench_corpus_path`. Generation takes about 300 CPU seconds (85% xz): some 2.5
    minutes on two idle cores, several times that on busy ones. As :func:`default_corpus`
    otherwise.
    """
    return _built_in(_BENCH_SHAPE, "bench corpus", cache_dir, progress)


def _shape_path(shape: tuple[int, int, int, int], cache_dir: Path | None) -> Path:
    if cache_dir is not None and not isinstance(cache_dir, str | os.PathLike):
        raise TypeError(f"cache_dir must be None or a folder's path, not {cache_dir!r}")
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    return root / corpus_dirname(*shape)


def _built_in(
    shape: tuple[int, int, int, int], what: str, cache_dir: Path | None, progress: bool
) -> Path:
    subsets, members, docs, seed = shape
    path = _shape_path(shape, cache_dir)
    root = path.parent
    if (path / COMPLETE_MARKER).is_file():
        return path
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file in its place, or in its parents'
        said = "cache_dir" if cache_dir is not None else "$OWT_CACHE_DIR or its default"
        raise FileExistsError(
            f"the cache folder {root} ({said}) is not a folder: a file is in its way"
        ) from None
    with _lock(root / f".{path.name}.lock"):
        if (path / COMPLETE_MARKER).is_file():
            return path
        if path.exists() and not (path.is_dir() and not any(path.iterdir())):
            raise FileExistsError(
                f"{path} exists but is not a complete synthetic corpus; remove it"
            )
        mb = _TEXT_BYTES.get(shape, subsets * members * docs * _MEAN_DOC_BYTES) / 1e6
        print(f"generating the {what} ({mb:.0f} MB of text) into {path}", file=sys.stderr)
        try:
            write_corpus(path, subsets, members, docs, seed, progress=progress)
        except FileExistsError:
            if (path / COMPLETE_MARKER).is_file():
                return path  # another process (without the lock) finished first
            raise
    return path


def paths_or_default(paths: Sequence[str], *, bench: bool = False) -> list[str]:
    """The given corpus paths, or a built-in corpus (generated once) when none: the default
    corpus, or with ``bench`` the bench corpus."""
    if paths:
        return list(paths)
    return [str(bench_corpus() if bench else default_corpus())]
