"""Redaction: URLs shown without credentials or query strings (signed URLs carry their
signature there), ``secret=…``-like values masked, and storage options reduced to what may
be shown or hashed (secret-named entries left out or shown as ``***``)."""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["hide_in_logs", "public_options", "redact", "redact_options"]

_USERINFO = re.compile(r"(://)[^/@\s]*@")
_QUERY = re.compile(r"\?[^\s'\"]*")
_SECRETS = re.compile(
    r"((?:aws_)?(?:secret|token|key|password|signature|credential)[a-z_-]*['\"]?\s*[:=]\s*['\"]?)"
    r"[^\s'\",}]+",
    re.IGNORECASE,
)

#: Option names whose values may be secret (or hold secrets, like ``headers``): never
#: part of a storage's ``place``.
_SECRET_NAMES = re.compile(
    r"secret|token|key|password|passwd|signature|credential|auth|session|cookie|headers",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` without URL credentials, query strings or ``secret=…``-like values."""
    text = _USERINFO.sub(r"\1", text)
    text = _QUERY.sub("", text)
    return _SECRETS.sub(r"\1***", text)


def public_options(value: Any, mask: bool = False) -> Any:
    """``value`` (options) without what may be secret, as JSON-safe data: secret-named
    entries left out, or their values shown as ``***`` with ``mask``."""
    if isinstance(value, dict):
        return {
            str(k): "***" if _SECRET_NAMES.search(str(k)) else public_options(v, mask)
            for k, v in value.items()
            if mask or not _SECRET_NAMES.search(str(k))
        }
    if isinstance(value, (list, tuple)):
        return [public_options(v, mask) for v in value]
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return type(value).__name__  # an object (a session, a client): its kind only


def redact_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Storage options as they may be shown or written: secret-named values as ``***``."""
    shown: dict[str, Any] = public_options(options or {}, mask=True)
    return shown


class _Redacted(logging.Filter):
    """Writes a record's message redacted (``redact``): the request logs of the HTTP and
    storage libraries name URLs with their credentials and query strings (a signed URL's
    signature), and S3's signing logs its signature, at DEBUG or INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # not ours to fix: let logging report it
            return True
        shown = redact(text)
        if shown != text:
            record.msg, record.args = shown, None
        return True


#: The packages whose loggers may write a URL or a signature (fsspec's backends, the HTTP
#: clients under them, botocore's signing, huggingface_hub's requests).
_LIBRARIES = ("fsspec", "s3fs", "gcsfs", "adlfs", "aiobotocore", "botocore", "aiohttp", "urllib3",
              "httpx", "httpx2", "httpcore", "httpcore2", "huggingface_hub")  # fmt: skip
_redacted = _Redacted()


def hide_in_logs() -> None:
    """Redact the records of every logger of ``_LIBRARIES`` there is (a filter applies to its
    logger's own records only, not to those its children pass up, so each one is given it).
    Called as a filesystem is made (its modules, so their loggers, are imported by then) and
    before the Hub's first request."""
    known = list(logging.Logger.manager.loggerDict)  # (a copy: loggers are made as we go)
    for name in known:
        if name.split(".", 1)[0] in _LIBRARIES:
            logger = logging.getLogger(name)
            if _redacted not in logger.filters:
                logger.addFilter(_redacted)
