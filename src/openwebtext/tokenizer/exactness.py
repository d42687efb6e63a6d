"""The exactness check: a fast backend is used only after it gave the reference's ids on every
hard string shipped with the package (``hard_strings.json``: whitespace runs to thousands,
CRLF, Unicode spaces, contractions, digits, CJK, emoji, combining marks, control characters,
special tokens' text, astral planes, ...), through each of its calls.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from openwebtext.tokenizer.spec import Backend

__all__ = ["HARD_STRINGS_FILE", "Difference", "first_difference", "hard_strings"]

#: The shipped file of hard strings (package data), as a path.
HARD_STRINGS_FILE = str(Path(__file__).with_name("hard_strings.json"))

#: (class, text, what differed): the first hard string on which a fast backend was wrong.
Difference = tuple[str, str, str]


@functools.cache
def hard_strings() -> tuple[tuple[str, str], ...]:
    """The shipped hard strings as ``(class, text)`` pairs, in the file's order."""
    raw = importlib.resources.files(__package__).joinpath("hard_strings.json").read_text("ascii")
    classes: dict[str, list[str]] = json.loads(raw)["classes"]
    return tuple((name, text) for name, texts in classes.items() for text in texts)


def _u32_ids(buffer: Any) -> list[int]:
    ids: list[int] = np.frombuffer(buffer, dtype="<u4").tolist()
    return ids


def first_difference(
    fast: Backend, reference: Backend, extra: Iterable[str] = ()
) -> Difference | None:
    """The first hard string (then ``extra``) on which ``fast`` gives other ids than
    ``reference`` through ``encode`` or ``encode_u32``, or fails; ``None`` if there is none."""
    texts = [*hard_strings(), *(("the vocabulary's own", text) for text in extra)]
    for cls, text in texts:
        expected = reference.encode(text)
        try:
            got = fast.encode(text)
            if got != expected:
                return cls, text, f"encode gave {_shown(got)}, {reference.name} {_shown(expected)}"
            if fast.encode_u32 is not None:
                got = _u32_ids(fast.encode_u32(text))
                if got != expected:
                    return (
                        cls,
                        text,
                        (f"encode_u32 gave {_shown(got)}, {reference.name} {_shown(expected)}"),
                    )
        except Exception as exc:
            return cls, text, f"it failed: {type(exc).__name__}: {exc}"
        except BaseException as exc:  # a Rust panic reaches Python as a BaseException
            if isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit):
                raise
            return cls, text, f"it failed: {type(exc).__name__}: {exc}"
    return None


def _shown(ids: list[int]) -> str:
    return repr(ids) if len(ids) <= 12 else f"{ids[:12]!r}... ({len(ids)} ids)"
