"""Bytes behind paths and URLs: storage settings (``Storage``), redaction, retries,
fsspec filesystems, the Hub, ranged reads and the member cache.

Rule: imports only the leaves (errors, files, formats, records, ...). Knows nothing of units'
meaning, processes or streams. Modules, bottom to top: ``redaction``; ``retry``; ``settings``
(``Storage``, aliases, identities); ``filesystems`` (fsspec per process, file info,
listing); ``validators`` (a response's ETag, Last-Modified or generation against the
indexed identity); ``hub`` (``hf://`` by its signed CDN URL); ``fetching`` (the one
module that knows both fsspec and the Hub; ``RangeFile``); ``membercache``; ``ranges``
(``RangeReader``); ``watchdog`` (the main process's "nothing for a minute" over remote
I/O); ``flags`` (command-line options).
"""

from __future__ import annotations

from openwebtext.source.fetching import RangeFile, fetch
from openwebtext.source.filesystems import expand_url, file_info, filesystem
from openwebtext.source.flags import (
    add_storage_option,
    add_storage_options,
    add_text_column,
    storage_kwargs,
)
from openwebtext.source.ranges import RangeReader, Span
from openwebtext.source.redaction import redact, redact_options
from openwebtext.source.retry import ABSENT, describe, with_retries
from openwebtext.source.retry import waited as retry_waited
from openwebtext.source.settings import (
    FileInfo,
    Storage,
    configure,
    decoded,
    file_name,
    is_url,
    placed,
    resolve,
)
from openwebtext.source.validators import CHANGED, local_identity, unchanged
from openwebtext.source.watchdog import watched

__all__ = [
    "ABSENT",
    "CHANGED",
    "FileInfo",
    "RangeFile",
    "RangeReader",
    "Span",
    "Storage",
    "add_storage_option",
    "add_storage_options",
    "add_text_column",
    "configure",
    "decoded",
    "describe",
    "expand_url",
    "fetch",
    "file_info",
    "file_name",
    "filesystem",
    "is_url",
    "local_identity",
    "placed",
    "redact",
    "redact_options",
    "resolve",
    "retry_waited",
    "storage_kwargs",
    "unchanged",
    "watched",
    "with_retries",
]
