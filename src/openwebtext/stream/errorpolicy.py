"""A stream's error policy (``ErrorPolicy``): ``on_error`` over its ``Counters``, the skips of
its units' reads counted and named, the run ended past ``max_errors``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from openwebtext.engine import Loaded
from openwebtext.errors import OWTError, TruncatedMember, in_part
from openwebtext.options import Options
from openwebtext.policy import MEMBER_COUNTERS, SkipPolicy, skips_in
from openwebtext.stream.counters import Counters
from openwebtext.stream.counts import ExpectedCounts

__all__ = ["ErrorPolicy"]


class ErrorPolicy:
    """``on_error`` over a stream's ``Counters``: ``policy.SkipPolicy``, the one skip rule.

    Every kind of skip counts against ``max_errors``: members, documents, members
    cut short (their documents before the cut are kept) and files skipped when
    the corpus was opened.

    Args:
        options: The stream's options.
        skipped_files: The corpus's files skipped at open (named first).
        part: The mixture's part the stream reads (its errors say it: ``in_part``).
    """

    def __init__(self, options: Options, skipped_files: Sequence[OWTError] = (),
                 units: Sequence[Any] = (), part: str | None = None) -> None:  # fmt: skip
        self.policy = SkipPolicy(options.on_error, options.max_errors)
        self.units = units
        self.part = part
        self.files = len(skipped_files)
        named = [in_part(copy.copy(e), part) for e in skipped_files]
        self.skipped: list[str] = [str(e) for e in named]
        """What was skipped, by name (the first 10,000)."""
        self.policy.said(named)  # (under warn: each file, as each member when it is read)
        self.others: Callable[[], int] = lambda: 0
        """The skips of the other streams of the same run (a mixture's other parts), which
        count against ``max_errors`` too."""

    def skip(self, error: OWTError, counters: Counters) -> Counters:
        """``counters`` with ``error`` counted under its counter (``policy.counter_of``), or
        raise it.

        Raises:
            OWTError: ``error`` itself, under ``on_error="raise"`` (its ``__cause__``
                says where the worker raised it).
            TooManyErrors: past ``max_errors`` skips.
        """
        key = self.policy.take(in_part(error, self.part))
        counters = counters.plus(**{key: 1})
        if len(self.skipped) < 10_000:
            self.skipped.append(str(error))
        self.check(counters, error)
        return counters

    def unit_read(
        self, loaded: Loaded, kept: Loaded, counters: Counters, expected: ExpectedCounts | None,
        again: bool = False,
    ) -> Counters:  # fmt: skip
        """``counters`` after a unit read, the policy applied to the errors of what is kept of
        it (all of it, or a share's part of a unit on its boundary); a member read whole is
        checked against the counts (``expected``). ``again``: a unit the rank reads again in
        the epoch (a pass repeating its share after skips), whose skips and replacements its
        first read counted, said and bounded (``max_errors``): read, not counted again."""
        counters = counters.plus(units=1, replaced_documents=0 if again else kept.replace)
        for error in () if again else kept.errors:
            counters = self.skip(error, counters)
        cut = any(isinstance(e, TruncatedMember) for e in loaded.errors) and bool(loaded.names)
        if expected is not None and not cut and (loaded.names or not loaded.errors):
            expected.check(self.units[loaded.unit], loaded)
        return counters

    def check(self, counters: Counters, error: OWTError | None) -> None:
        """End the run once the skips are more than ``max_errors``.

        Raises:
            TooManyErrors: naming ``error``, the last skip.
        """
        if error is not None:
            self.policy.check(self.skips(counters) + self.others(), error)

    def skips(self, counters: Counters) -> int:
        """Every skip of ``counters``, the files skipped at open included."""
        counts = {key: getattr(counters, key) for key in MEMBER_COUNTERS}
        return skips_in({**counts, "skipped_files": self.files})
