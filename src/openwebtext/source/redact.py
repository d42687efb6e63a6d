"""Redaction: URLs shown without credentials or query strings (signed URLs carry their
signature there), ``secret=…``-like values masked, and storage options reduced to what may
be shown or hashed (secret-named entries left out or shown as ``***``)."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["public_options", "redact", "redact_options"]

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
