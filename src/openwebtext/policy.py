"""The skip policy (``on_error``, ``max_errors``): the one rule every engine applies to a bad
member, document or file.

``counter_of`` says which counter an error goes under: a member cut short whose documents
before the cut were kept (``TruncatedMember``) is a ``partial_members``, one bad document
(``CorruptDocument``) a ``skipped_documents``, any other failure of a member a
``skipped_members``; a file left out when the corpus was opened is a ``skipped_files``.
Every one of them counts against ``max_errors``. ``SkipPolicy`` raises the error under
``raise``, logs one line under ``warn``, and raises ``TooManyErrors`` once the skips are more
than ``max_errors``. The stream (``stream.ErrorPolicy``), ``owt tokenize``
(``prepare``), and the Ray engine (its slices' totals and ``read_openwebtext``) all use it,
so the same corpus and options give the same decision on every engine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping, Sequence

from openwebtext.errors import (
    CorpusError,
    CorruptDocument,
    MemberTooLarge,
    OWTError,
    TooManyErrors,
    TruncatedMember,
    Unreadable,
)
from openwebtext.options import int_at_least

__all__ = ["COUNTERS", "MEMBER_COUNTERS", "SkipPolicy", "a_verdict", "counter_of", "skips_in"]

#: The counters of what a member-level reader skips, as ``meta.json`` and states name them.
MEMBER_COUNTERS = ("skipped_members", "skipped_documents", "partial_members")
#: Every counter that counts against ``max_errors``.
COUNTERS = (*MEMBER_COUNTERS, "skipped_files")

_log = logging.getLogger("openwebtext")


def counter_of(error: OWTError) -> str:
    """The counter ``error`` is counted under (one of ``MEMBER_COUNTERS``)."""
    if isinstance(error, TruncatedMember):  # its documents before the cut are kept
        return "partial_members"
    if isinstance(error, CorruptDocument):
        return "skipped_documents"
    return "skipped_members"


def a_verdict(error: OWTError) -> bool:
    """Whether a unit's failure is a verdict on its bytes, the same in any run that reads them
    (corrupt, cut short, of no known format): what a count may keep (``Counts.failed``). Not
    one that could not be read (``Unreadable``: a disk's, a network's error), one over
    ``max_member_bytes`` (another limit reads it), nor a worker that died, hung or met what the
    library did not expect (a ``WorkerError``)."""
    return isinstance(error, CorpusError) and not isinstance(error, MemberTooLarge | Unreadable)


def skips_in(counts: Mapping[str, object]) -> int:
    """The skips ``counts`` holds: the sum of its ``COUNTERS`` (a missing one is 0).

    Raises:
        ValueError: a counter that is not an int >= 0 (a damaged record).
    """
    total = 0
    for key in COUNTERS:
        value = counts.get(key, 0)
        if not int_at_least(value, 0):
            raise ValueError(f"{key} must be an int >= 0, not {value!r}")
        total += value
    return total


class SkipPolicy:
    """``on_error`` and ``max_errors``: raise a bad member's error, or count it as skipped.

    Args:
        on_error: ``raise``, ``skip`` (count it) or ``warn`` (count it and log one line).
        max_errors: With skip or warn, raise ``TooManyErrors`` past this many skips in all
            (None: no bound).
    """

    def __init__(self, on_error: str, max_errors: int | None = None) -> None:
        if on_error not in ("raise", "skip", "warn"):
            raise ValueError(f"on_error must be 'raise', 'skip' or 'warn', not {on_error!r}")
        self.on_error = on_error
        self.max_errors = max_errors

    def take(self, error: OWTError) -> str:
        """The counter ``error`` goes under, once logged (``warn``); under ``raise``, raise it.

        The caller adds one to that counter, then calls ``check`` with its new total.
        """
        if self.on_error == "raise" or not error.skippable:
            raise error  # (not the data's fault: a skip would be kept as the corpus's)
        if self.on_error == "warn":
            _log.warning("skipped: %s", error)
        return counter_of(error)

    def said(self, errors: Sequence[OWTError]) -> None:
        """Log, under ``warn``, what was skipped before this policy took over (the files left
        out when the corpus was opened, which count as skips of the run): one line each."""
        if self.on_error == "warn":
            for error in errors:
                _log.warning("skipped: %s", error)

    def count(self, error: OWTError, counts: MutableMapping[str, int]) -> str:
        """``take`` ``error``, add one to its counter in ``counts``, then ``check`` them all.

        Raises:
            OWTError: ``error`` itself, under ``on_error="raise"``.
            TooManyErrors: past ``max_errors`` skips in ``counts``.
        """
        key = self.take(error)
        counts[key] = counts.get(key, 0) + 1
        self.check(skips_in(counts), error)
        return key

    def check(self, skips: int, last: OWTError | None = None) -> None:
        """End the run once ``skips`` (every counter's sum) is more than ``max_errors``.

        Raises:
            TooManyErrors: naming ``last``, the last skip, when given.
        """
        if self.on_error == "raise" or self.max_errors is None or skips <= self.max_errors:
            return
        message = f"{skips} skipped, more than max_errors={self.max_errors}"
        if last is None:
            raise TooManyErrors(message)
        raise TooManyErrors(f"{message}; last: {last}") from last
