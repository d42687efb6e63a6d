"""Bytes behind paths and URLs: storage settings (``Storage``), redaction, retries,
fsspec filesystems, the Hub, ranged reads and the member cache.

Rule: imports only the leaves (errors, files, formats, records, ...). Knows nothing of units'
meaning, processes or streams.
"""

from __future__ import annotations

from openwebtext.source.flags import add_storage_option, add_storage_options, storage_kwargs
from openwebtext.source.membercache import MemberCache, parse_size
from openwebtext.source.ranges import THREADS, RangeReader
from openwebtext.source.storage import (
    FileInfo,
    RangeFile,
    Storage,
    alias,
    expand_url,
    file_info,
    identity,
    is_url,
    placed,
    redact,
    redact_options,
    remember,
    resolve,
)

__all__ = [
    "THREADS",
    "FileInfo",
    "MemberCache",
    "RangeFile",
    "RangeReader",
    "Storage",
    "add_storage_option",
    "add_storage_options",
    "alias",
    "expand_url",
    "file_info",
    "identity",
    "is_url",
    "parse_size",
    "placed",
    "redact",
    "redact_options",
    "remember",
    "resolve",
    "storage_kwargs",
]
