"""Faults: every request is retried with exponential backoff and full jitter, within
``RETRY_ATTEMPTS`` attempts and ``RETRY_SECONDS`` seconds, on what may pass (connection refused
or reset, timeouts, HTTP 429 and 5xx, a body shorter than asked for: a short read is never taken
as data). The seconds do not count the longest failed attempt, so one stall or reset is retried
however long it took (a socket timeout may be as long as the budget), unless the next attempt
could end past ``RETRY_CEILING`` (the pool's ``timeout`` would call the worker hung): a request
ends within ``RETRY_CEILING`` (a host's ``Retry-After`` set by other requests aside), and its
message says how many attempts failed and what ended the last one. A 429 or 503 that says
``Retry-After`` is the server's word for its host, not for one request: until that time (at most
``RETRY_AFTER_CAP`` on) no request to the host starts, from any thread (``host_of``: one "not
before" time per host), so the waiting is done once, not again by every request in flight or
queued (a walk of tar headers, 2 KB each); the time waited counts in the request's own time (its
budget and its message) and in ``waited``. A missing bucket, key or file, or a refused
credential, is a :class:`Fatal` error at once; library errors are shown as one redacted line
(``describe``). Every request also has a deadline for its whole answer (``deadline``), so a
server that drips its body or stalls ends as a timeout, never a hang.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from openwebtext.source.redaction import redact

__all__ = [
    "ABSENT",
    "REQUEST_FLOOR",
    "REQUEST_RATE",
    "RETRY_AFTER_CAP",
    "RETRY_ATTEMPTS",
    "RETRY_BASE",
    "RETRY_CAP",
    "RETRY_CEILING",
    "RETRY_SECONDS",
    "Fatal",
    "HTTPStatus",
    "ShortRead",
    "Stalled",
    "classify",
    "deadline",
    "describe",
    "host_of",
    "http_status",
    "idle",
    "retry_after",
    "touch",
    "waited",
    "with_retries",
]

#: Attempts per request (the first one included), and the time they may take in all, the
#: longest failed attempt not counted: a server that stalls every answer past HTTP's 20 s
#: read timeout fails a unit after two attempts, ~40 s, before the pool's default
#: ``timeout`` (60 s) would call its worker hung.
RETRY_ATTEMPTS = 6
RETRY_SECONDS = 20.0
#: ... and no attempt starts that, after its wait and as long as its deadline (``limit``) or
#: the longest failed one, would end past this many seconds of the request: within the pool's
#: default ``timeout`` (60 s), so a server that drips every answer (30 s an attempt) fails the
#: unit once, not its worker as hung.
RETRY_CEILING = 55.0
#: Backoff: a random wait in [0, min(cap, base * 2**attempt)) ("full jitter").
RETRY_BASE = 0.05
RETRY_CAP = 4.0
#: The longest ``Retry-After`` honoured (a longer one waits this long).
RETRY_AFTER_CAP = 10.0
#: A request's whole answer must come within ``REQUEST_FLOOR`` seconds plus one second per
#: ``REQUEST_RATE`` bytes asked for: a 16 MB merged request gets 46 s, before the pool's
#: default ``timeout`` (60 s) would call its worker hung.
REQUEST_FLOOR = 30.0
REQUEST_RATE = 1 << 20


_activity = [time.monotonic()]


def touch() -> None:
    """Note remote I/O now (an attempt started, ended or failed): see ``idle``."""
    _activity[0] = time.monotonic()


def idle() -> float:
    """Seconds since this process's last remote I/O (``touch``)."""
    return time.monotonic() - _activity[0]


#: Per host (``host_of``): the ``time.monotonic()`` before which no request to it starts.
_not_before: dict[str, float] = {}
_hosts = threading.Lock()
_waited = [0.0]


def host_of(url: str, place: str = "") -> str:
    """What requests share a ``Retry-After`` by: ``url``'s scheme and host, and the storage's
    ``place`` (the same bucket name on two endpoints is two hosts)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme.lower()}://{(parts.netloc.rpartition('@')[2]).lower()}\0{place}"


def waited() -> float:
    """Seconds this process's requests have waited for their hosts' ``Retry-After``."""
    return _waited[0]


def _hold_off(host: str, seconds: float) -> None:
    """No request to ``host`` starts for ``seconds`` from now (a later time already set stays)."""
    with _hosts:
        _not_before[host] = max(_not_before.get(host, 0.0), time.monotonic() + seconds)


def _wait_for(host: str, until: float) -> None:
    """Wait until ``host`` may be asked again, but not past ``until``."""
    while True:
        with _hosts:
            left = min(_not_before.get(host, 0.0), until) - time.monotonic()
        if left <= 0:
            return
        touch()  # waiting for the server's word is not a stall
        time.sleep(left)
        with _hosts:
            _waited[0] += left


def deadline(size: int = 0) -> float:
    """Seconds a request for ``size`` bytes (0: a HEAD or a listing) may take in all."""
    return REQUEST_FLOOR + max(0, size) / REQUEST_RATE


T = TypeVar("T")


#: The reason a request fails for a file that is not there (404, 410, a missing key or bucket):
#: what a reader that may find none (a token file's ``meta.json``) tells from other failures.
ABSENT = "no such file, key or bucket"


class ShortRead(Exception):
    """A response body shorter than what was asked for (retried, never used)."""


class Stalled(Exception):
    """A server that sent nothing for a socket's timeout (retried like any timeout; not a
    ``TimeoutError``, which fsspec would report as the request's deadline)."""


class Fatal(Exception):
    """A request that must not be retried, or whose retries ran out: ``reason`` says why,
    ``last`` is the last attempt's error (a machine out of descriptors is not the file's)."""

    def __init__(self, reason: str, last: BaseException | None = None):
        super().__init__(reason)
        self.reason, self.last = reason, last


class HTTPStatus(Exception):
    """An HTTP answer that is not the bytes asked for (classified by its ``status``)."""

    def __init__(self, status: int, retry_after: str | None = None):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after
        """The answer's ``Retry-After`` header, if any."""


def classify(exc: BaseException) -> str | None:
    """Why ``exc`` must not be retried, or None if it may pass."""
    if isinstance(exc, Fatal):
        return exc.reason
    if any(type(one).__name__ == "TooManyRedirects" for one in _chain(exc)):  # (aiohttp's)
        return "too many redirects (a redirect loop)"
    status = http_status(exc)
    if isinstance(exc, FileNotFoundError) and status in (None, 404, 410):
        behind = _not_absent(exc) if status is None else None
        return ABSENT if behind is None else classify(behind)
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
            return ABSENT
        return f"HTTP {status}"
    if isinstance(exc, (TypeError, ValueError)) and not isinstance(exc, ShortRead):
        return describe(exc)
    return None


def _not_absent(exc: FileNotFoundError) -> BaseException | None:
    """What failed behind a "not found" that says no missing file: fsspec's HTTP ``info`` turns
    any failure of its GET into ``FileNotFoundError`` (a connection reset, a timeout, an option
    aiohttp refuses), which is retried or said as what it is; None: a missing file (a status
    404 or 410, or no cause: a local file's, s3fs's translated ``NoSuchKey``)."""
    for one in _chain(exc.__cause__):
        if isinstance(one, FileNotFoundError):
            continue
        transport = type(one).__module__.startswith("aiohttp")
        if transport or isinstance(one, (OSError, TimeoutError, ValueError, TypeError)):
            return one
        return None
    return None


def _chain(exc: BaseException | None, depth: int = 4) -> Iterator[BaseException]:
    """``exc`` and the exceptions behind it (its cause, else its context), ``depth`` at most:
    what a library raised around the error that says why."""
    for _ in range(depth):
        if exc is None:
            return
        yield exc
        exc = exc.__cause__ or exc.__context__


def http_status(exc: BaseException | None) -> int | None:
    """The HTTP status behind ``exc`` (fsspec's HTTP ``info`` hides it as the cause)."""
    for one in _chain(exc):
        status = getattr(one, "status", None)
        # (aiohttp says an answer it cannot parse, or a redirect loop, with a status the
        # server never sent: 400 for a bad status line, 0)
        parsed = type(one.__cause__).__module__ != "aiohttp.http_exceptions"
        if isinstance(status, int) and 100 <= status <= 599 and parsed:
            return status
        # huggingface_hub's errors keep their response; gcsfs's HttpError has a code
        # (only gcsfs's: aiohttp's parse errors, e.g. a body cut short, say code 400).
        status = getattr(getattr(one, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        status = getattr(one, "code", None) if type(one).__module__.startswith("gcsfs") else None
        if isinstance(status, int):
            return status
    return None


def retry_after(exc: BaseException | None) -> float | None:
    """The seconds the server behind ``exc`` asked to wait (``Retry-After``: seconds or an
    HTTP date), or None."""
    for one in _chain(exc):
        value = getattr(one, "retry_after", None)
        if value is None:
            headers: Any = getattr(one, "headers", None) or getattr(
                getattr(one, "response", None), "headers", None
            )
            value = headers.get("Retry-After") if hasattr(headers, "get") else None
        if isinstance(value, str) and value.strip():
            return _seconds(value.strip())
    return None


def _seconds(value: str) -> float | None:
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def describe(exc: BaseException) -> str:
    """An exception as one short redacted line: for a timeout, the one that fired; for a
    file "not found" that was an HTTP error (fsspec's ``info`` says so of a 503), its status."""
    status = http_status(exc) if isinstance(exc, FileNotFoundError) else None
    if status is not None and status not in (404, 410):
        return f"HTTPStatus: HTTP {status}"
    behind = _not_absent(exc) if isinstance(exc, FileNotFoundError) else None
    if behind is not None:
        return describe(behind)
    if type(exc.__cause__).__module__ == "aiohttp.http_exceptions":
        said = str(getattr(exc.__cause__, "message", "") or "").strip().splitlines()
        return redact(f"a malformed answer from the server{f': {said[0]}' if said else ''}")
    exc = _socket_timeout(exc) or exc
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    return redact(f"{name}: {text}" if text else name)


def _socket_timeout(exc: BaseException) -> BaseException | None:
    """aiohttp's socket timeout behind a ``TimeoutError`` (fsspec turns every timeout of a
    call into its ``FSTimeoutError``, which ``filesystems.within`` names the deadline)."""
    if not isinstance(exc, TimeoutError):
        return None
    behind = _chain(exc.__cause__ or exc.__context__)
    return next((e for e in behind if isinstance(e, TimeoutError)
                 and type(e).__module__.startswith("aiohttp")), None)  # fmt: skip


def with_retries(
    call: Callable[[], T], what: str, host: str | None = None, limit: float | None = None
) -> T:
    """Run ``call`` until it succeeds, a fatal error, or the attempts or time run out.

    ``host`` (``host_of``): the server's ``Retry-After`` holds back every request to it,
    and each attempt first waits for the time its host was given.

    ``RETRY_SECONDS`` does not count the longest failed attempt: a failure is retried
    while attempts are left and the time spent besides it is within the budget, so one
    stall is always retried, unless the next attempt, after its wait, could end past
    ``RETRY_CEILING`` (``limit``: the seconds one attempt may take, its deadline; None:
    ``REQUEST_FLOOR``'s).

    Raises:
        Fatal: a missing file or refused credential (at once), or retries ran
            out; its reason says which and why.
    """
    start = time.monotonic()
    attempt = 0
    longest = 0.0  # the longest failed attempt: not counted in the budget
    while True:
        attempt += 1
        if host is not None:
            _wait_for(host, start + longest + RETRY_SECONDS)
        touch()
        began = time.monotonic()
        try:
            return call()
        except Exception as exc:
            fatal = classify(exc)
            if fatal is not None:
                raise Fatal(fatal) from None
            now = time.monotonic()
            longest = max(longest, now - began)
            elapsed = now - start
            spent = elapsed - longest
            delay = random.uniform(0, min(RETRY_CAP, RETRY_BASE * 2**attempt))
            asked = retry_after(exc)
            wait = delay if asked is None else max(delay, min(RETRY_AFTER_CAP, asked))
            # The next attempt, after its wait, may take its deadline (or the longest so far).
            last = elapsed + wait + max(longest, REQUEST_FLOOR if limit is None else limit)
            if attempt >= RETRY_ATTEMPTS or spent >= RETRY_SECONDS or last > RETRY_CEILING:
                raise Fatal(
                    f"{what} failed {attempt} times in {elapsed:.1f} s; last: {describe(exc)}",
                    exc,
                ) from None
            if asked is not None and host is not None:  # the host's wait, for every request
                _hold_off(host, min(RETRY_AFTER_CAP, asked))
            elif asked is not None:  # the server said when: a 429 is not a fault to rush
                delay = max(delay, min(RETRY_AFTER_CAP, asked))
                with _hosts:
                    _waited[0] += delay
            time.sleep(min(delay, max(0.0, RETRY_SECONDS - spent)))
        finally:
            touch()
