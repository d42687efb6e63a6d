"""Damaging a saved record field by field: every ``(path, damaged copy)`` of a JSON record, and
the one check that a damaged record is one ``StateError`` naming that field (the stream's
states and prepare's records alike)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from openwebtext import StateError
from openwebtext.codec import Record

DELETE = object()


def paths(node: Any, at: str = "") -> list[tuple[str, tuple[Any, ...]]]:
    """Every ``(dotted path, key path)`` of a JSON tree below its root."""
    out: list[tuple[str, tuple[Any, ...]]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in items:
        path = f"{at}[{key}]" if isinstance(key, int) else f"{at}.{key}" if at else key
        out.append((path, (key,)))
        if isinstance(child, (dict, list)):
            out += [(p, (key, *keys)) for p, keys in paths(child, path)]
    return out


def wrong_values(value: Any) -> list[Any]:
    """Values no field holding ``value`` accepts (every int field of a record is >= 0)."""
    if isinstance(value, bool):
        return [0, "true", None if value else 1.5]
    if isinstance(value, int):
        return [True, str(value), -1, 0.5 + value]
    if isinstance(value, float):
        return ["x", True]
    if isinstance(value, str):  # (a lone surrogate: JSON's "\udcff", which json.loads takes)
        return [3, False, ["x"], "\udcff"]
    if value is None:
        return [{"x": 1}, -1]
    return [7, "x"] if value else [7]


def get(node: Any, keys: tuple[Any, ...]) -> Any:
    for key in keys:
        node = node[key]
    return node


def changed(record: dict[str, Any], keys: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A copy of ``record`` with the field at ``keys`` set to ``value`` (``DELETE``: removed)."""
    out = json.loads(json.dumps(record))
    *parents, last = keys
    node = get(out, tuple(parents))
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


def mutants(record: dict[str, Any]) -> st.SearchStrategy[tuple[str, dict[str, Any], str]]:
    """``(what, damaged record, the path the error must name)``: any field at any depth of a
    wrong type, a bool for an int, out of its bounds, missing, or an unknown key added.

    The damages are listed first (path, keys, value), and only the one drawn is copied into
    a damaged record: an example costs one copy, not one per damage of the record."""
    cases: list[tuple[str, tuple[Any, ...], Any, str]] = []
    for path, keys in paths(record):
        last = keys[-1]
        for wrong in wrong_values(get(record, keys)):
            cases.append((f"{path}={wrong!r}", keys, wrong, path))
        if isinstance(last, str) and last != "format":
            cases.append((f"{path} missing", keys, DELETE, path))
    for path, keys in [("", ()), *paths(record)]:
        if isinstance(get(record, keys), dict):
            extra = f"{path}.extra" if path else "extra"
            cases.append((f"{extra} added", (*keys, "extra"), 1, extra))
    return st.sampled_from(cases).map(
        lambda case: (case[0], changed(record, case[1], case[2]), case[3])
    )


def check_one_error(parse: Callable[[Any], Any], case: tuple[str, dict[str, Any], str]) -> None:
    """``parse`` of the damaged record of ``case`` (from ``mutants``) raises one ``StateError``
    naming the damaged field, and nothing else; or, for a field left out that has a default,
    reads the record."""
    what, bad, path = case
    try:
        parsed = parse(bad)
    except StateError as exc:
        assert exc.field is not None and exc.field in str(exc), (what, str(exc))
        if what.endswith("missing") and exc.field != path:
            # A key with a default is read at it; the record's check then names the field
            # that disagrees with it: one of the record's own, or of a record around it.
            record = path.rpartition(".")[0]
            assert record.startswith(exc.field.rpartition(".")[0]), (what, str(exc))
            return
        assert exc.field == path, (what, str(exc))
        return
    # Only a field with a default may be left out: the record reads it at its default.
    assert what.endswith("missing"), what
    assert isinstance(parsed, Record)
