"""Command-line arguments shared by ``owt``'s commands and ``owt bench``: where a corpus
behind URLs is read from (``--storage-option``, ``--cache-dir``, ``--cache-size``), and which
column or field of a table holds the text (``--text-column``).

Here rather than in ``cli`` because ``owt bench`` (``openwebtext.bench``), which ``cli``
imports, takes them too.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from openwebtext.source.membercache import parse_size

__all__ = [
    "add_storage_option",
    "add_storage_options",
    "add_text_column",
    "size",
    "storage_kwargs",
    "storage_option",
]


def storage_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``; the value as JSON when it is (``true``, ``3``), else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return key, parsed


def add_storage_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--storage-option`` (repeatable)."""
    parser.add_argument(
        "--storage-option",
        dest="storage_options",
        metavar="KEY=VALUE",
        type=storage_option,
        action="append",
        default=[],
        help="for URLs (input and output): passed to the fsspec filesystem (repeatable), "
        "e.g. endpoint_url=…",
    )


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--storage-option`` (repeatable), ``--cache-dir`` and ``--cache-size``."""
    add_storage_option(parser)
    parser.add_argument(
        "--cache-dir", default=None, help="for URLs: keep the members read in this folder"
    )
    parser.add_argument(
        "--cache-size",
        type=size,
        default=None,
        metavar="SIZE",
        help="cap of --cache-dir, e.g. 20G (least recently used out first)",
    )


def size(text: str) -> int:
    """``20G``, ``512M``… as bytes, for argparse."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def storage_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``Corpus.open``'s ``storage_options``, ``cache_dir`` and ``cache_size`` from ``args``."""
    options = dict(getattr(args, "storage_options", None) or [])
    return {
        "storage_options": options or None,
        "cache_dir": getattr(args, "cache_dir", None),
        "cache_size": getattr(args, "cache_size", None),
    }


def add_text_column(parser: argparse.ArgumentParser) -> None:
    """``--text-column``: the column of parquet files (field of JSON lines) read as text."""
    parser.add_argument(
        "--text-column",
        default="text",
        metavar="NAME",
        help="the column of parquet files, or the field of JSON lines, that holds each "
        "document's text (default text)",
    )
