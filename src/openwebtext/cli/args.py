"""What several ``owt`` commands take alike: argparse types that refuse a value as the
library would (``option_type``, ``at_least``, ``shard``), and the flags written once for
every command that has them (corpus paths, ``-j``, ``--on-error``, ``-q``)."""

from __future__ import annotations

import argparse
import glob
import math
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from openwebtext.engine import cpu_count
from openwebtext.files import named
from openwebtext.index import Corpus
from openwebtext.options import option_type as option_type
from openwebtext.source import add_text_column, is_url, storage_kwargs
from openwebtext.synth import paths_or_default
from openwebtext.tokenfiles import beside
from openwebtext.tokenizer import TokenizerError, load_tokenizer, parse_spec

__all__ = [
    "Subparsers",
    "add_jobs",
    "add_on_error",
    "add_paths",
    "add_quiet",
    "add_text_column",
    "at_least",
    "open_corpus",
    "option_type",
    "parse_shard",
    "plural",
    "token_files",
    "tokenizer_spec",
]

#: What ``add_subparsers`` returns: each command module adds its parser to it.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1: "1 document", "2 documents"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"



def at_least(low: int) -> Any:
    """An argparse type: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, not {value}")
        return value

    return parse


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``--shard i/n`` as ``(i, n)``; None when not given."""
    if text is None:
        return None
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard takes i/n (e.g. 0/4), not {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise ValueError(f"--shard i/n needs 0 <= i < n, not {text!r}")
    return index, count


def add_paths(parser: argparse.ArgumentParser) -> None:
    """The corpus paths of ``stream``, ``index`` and ``tokenize``."""
    parser.add_argument(
        "paths", nargs="*", type=named("path"), help="files, folders or glob patterns (or URLs)"
    )


def tokenizer_spec(text: str) -> str:
    """An argparse type of ``--tokenizer``: a spec as ``parse_spec`` reads it, else refused
    (exit 2); its encoding or file is loaded by the run."""
    try:
        parse_spec(text)
    except TokenizerError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """``-j``: the worker processes of the loader."""
    cores = cpu_count()
    parser.add_argument(
        "-j",
        "--jobs",
        type=option_type("workers"),
        default=cores,
        help=f"worker processes (default {cores}: the cores this process may use)",
    )


def add_on_error(parser: argparse.ArgumentParser) -> None:
    """Every command's ``--on-error``: what a damaged member or document does."""
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip", "warn"),
        default="raise",
        help="raise: stop at the first damaged member or document (naming it); skip: leave it "
        "out and count it; warn: skip and log it (default raise)",
    )


def add_quiet(parser: argparse.ArgumentParser) -> None:
    """``-q``: no progress bar."""
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


#: How a file of token ids is named (``Corpus.open_tokens``: ``train.bin``, llm.c's shards,
#: datatrove's ``.ds``); ``owt stream`` reads such files with ``--tokenizer``.
_TOKEN_NAMES = (".bin", ".ds")


def token_files(paths: list[str] | None) -> bool:
    """Whether ``paths`` name files of token ids (by their names: a URL's without its query
    string, a glob pattern's), not a text corpus.

    Raises:
        ValueError: some do and some do not (a mixture takes each kind as a part).
    """
    named = [urlsplit(p).path if is_url(p) else str(p) for p in paths or ()]
    named_so = [name.rstrip("/").endswith(_TOKEN_NAMES) for name in named]
    if any(named_so) and not all(named_so):
        raise ValueError("give files of token ids (.bin, .ds) or a text corpus, not both: a "
                         "mixture takes each as a part (--mix NAME=PATH:WEIGHT)")  # fmt: skip
    return any(named_so)


def open_corpus(args: argparse.Namespace, paths: list[str] | None = None,
                tokens: bool = False) -> Corpus:  # fmt: skip
    """The corpus of ``paths`` (the command's; the built-in one without), with its storage
    flags; with ``tokens``, files of token ids (``token_files``; a local glob pattern, its
    files in order) open as a token corpus, whose eot and dtype are their ``meta.json``'s,
    else the eot of ``--tokenizer`` (``Corpus.open_tokens``'s default: GPT-2's)."""
    given = args.paths if paths is None else paths
    text_column = getattr(args, "text_column", "text")
    if tokens and token_files(given):
        kwargs = storage_kwargs(args)
        if kwargs["cache_dir"] or kwargs["cache_size"] is not None or text_column != "text":
            raise ValueError("files of token ids are read as they are: leave --cache-dir, "
                             "--cache-size and --text-column out")  # fmt: skip
        files: list[str] = []
        for path in given:  # (a pattern the shell did not expand: its files, in order)
            pattern = glob.has_magic(path) and not is_url(path)
            found = sorted(glob.glob(path, recursive=True)) if pattern else []
            files += found or [path]
        return Corpus.open_tokens(files, eot=_eot(files, getattr(args, "tokenizer", None)),
                                  storage_options=kwargs["storage_options"])  # fmt: skip
    on_error = getattr(args, "on_error", "raise")  # whole files too, under --on-error
    return Corpus.open(
        paths_or_default(given),
        on_error=on_error,
        text_column=text_column,
        **storage_kwargs(args),
    )


def _eot(files: list[str], spec: str | None) -> int | None:
    """The end-of-text id of local token ``files`` read with the tokenizer ``spec``: its own,
    unless a ``meta.json`` beside one says another (None: theirs, and that tokenizer's
    refusal, ``WrongTokenizer``; a URL's, or no tokenizer: ``Corpus.open_tokens``'s rule)."""
    if not spec or any(map(is_url, files)):
        return None
    mine = load_tokenizer(spec).eot
    said = {run.eot for run in map(beside, files) if run is not None}
    return mine if said <= {mine} else None


def add_wait(parser: argparse.ArgumentParser) -> None:
    """``--wait``: one run per output folder; a second waits instead of stopping at once."""
    parser.add_argument(
        "--wait",
        action="store_true",
        help="if another run holds OUT's lock, wait for it to end (default: stop at once, "
        "naming its pid and host)",
    )


def parse_mix(value: str) -> tuple[str, str, float]:
    """``--mix NAME=PATH_OR_URL:WEIGHT`` as its three parts."""
    name, eq, rest = value.partition("=")
    where, colon, weight = rest.rpartition(":")
    try:
        number = float(weight)
    except ValueError:
        number = -1.0
    if not eq or not name or not colon or not where or not 0 <= number < math.inf:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give NAME=PATH_OR_URL:WEIGHT, e.g. web=data/owt:0.7 (a finite weight "
            ">= 0)"
        )
    return name, where, number
