"""Faults: every request is retried with exponential backoff and full jitter, within
``RETRY_ATTEMPTS`` attempts and ``RETRY_SECONDS`` seconds, on what may pass (connection
refused or reset, timeouts, HTTP 429 and 5xx, a body shorter than asked for: a short read is
never taken as data). A missing bucket, key or file, or a refused credential, is a
:class:`Fatal` error at once; library errors are shown as one redacted line (``describe``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from openwebtext.source.redact import redact

__all__ = [
    "RETRY_ATTEMPTS",
    "RETRY_BASE",
    "RETRY_CAP",
    "RETRY_SECONDS",
    "Fatal",
    "HTTPStatus",
    "ShortRead",
    "classify",
    "describe",
    "http_status",
    "with_retries",
]

#: Attempts per request (the first one included), and the time they may take in all:
#: with HTTP's 20 s read timeout, a unit fails within ~40 s, before the pool's default
#: ``timeout`` (60 s) would call its worker hung.
RETRY_ATTEMPTS = 6
RETRY_SECONDS = 20.0
#: Backoff: a random wait in [0, min(cap, base * 2**attempt)) ("full jitter").
RETRY_BASE = 0.05
RETRY_CAP = 4.0

T = TypeVar("T")


class ShortRead(Exception):
    """A response body shorter than what was asked for (retried, never used)."""


class Fatal(Exception):
    """A request that must not be retried, or whose retries ran out: ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class HTTPStatus(Exception):
    """An HTTP answer that is not the bytes asked for (classified by its ``status``)."""

    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


def classify(exc: BaseException) -> str | None:
    """Why ``exc`` must not be retried, or None if it may pass."""
    if isinstance(exc, Fatal):
        return exc.reason
    status = http_status(exc)
    if isinstance(exc, FileNotFoundError) and status in (None, 404, 410):
        return "no such file, key or bucket"
    if isinstance(exc, PermissionError) or (
        # gcsfs raises a plain OSError for a 403, its text starting with "Forbidden"
        type(exc) is OSError and str(exc).startswith("Forbidden")
    ):
        return "access refused (check the credentials)"
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return "not a file"
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 429):
        if status in (401, 403):
            return f"access refused: HTTP {status} (check the credentials)"
        if status == 404:
            return "no such file, key or bucket"
        return f"HTTP {status}"
    if isinstance(exc, (TypeError, ValueError)) and not isinstance(exc, ShortRead):
        return describe(exc)
    return None


def http_status(exc: BaseException | None) -> int | None:
    """The HTTP status behind ``exc`` (fsspec's HTTP ``info`` hides it as the cause)."""
    for _ in range(4):
        if exc is None:
            return None
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            return status
        # huggingface_hub's errors keep their response; gcsfs's HttpError has a code
        # (only gcsfs's: aiohttp's parse errors, e.g. a body cut short, say code 400).
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        status = getattr(exc, "code", None)
        if isinstance(status, int) and type(exc).__module__.startswith("gcsfs"):
            return status
        exc = exc.__cause__ or exc.__context__
    return None


def describe(exc: BaseException) -> str:
    """An exception as one short redacted line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return redact(f"{name}: {text}" if text else name)


def with_retries(call: Callable[[], T], what: str) -> T:
    """Run ``call`` until it succeeds, a fatal error, or the attempts or time run out.

    Raises:
        Fatal: a missing file or refused credential (at once), or retries ran
            out; its reason says which and why.
    """
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:
            fatal = classify(exc)
            if fatal is not None:
                raise Fatal(fatal) from None
            elapsed = time.monotonic() - start
            if attempt >= RETRY_ATTEMPTS or elapsed >= RETRY_SECONDS:
                raise Fatal(
                    f"{what} failed {attempt} times in {elapsed:.1f} s; last: {describe(exc)}"
                ) from None
            delay = random.uniform(0, min(RETRY_CAP, RETRY_BASE * 2**attempt))
            time.sleep(min(delay, max(0.0, RETRY_SECONDS - elapsed)))
