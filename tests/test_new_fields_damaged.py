"""The damaged-field property (``records.mutants``, as ``test_stream_schema.py`` runs it over
the golden states) over the state fields session 26 added, which no golden state holds (each is
written only where skips lie in a best-fit window resharded, and left out at its default):
a batches state's ``window_repeats`` and a mixture's ``window_slots``, a reshard section's
``ranks[].pass_end``, ``windows[].repeats`` and ``overrun``. Each state is one the library made;
every damage of each such field (a wrong type, a bool for an int, out of bounds, missing) is one
``StateError`` naming its path, or, for one left out, a state that reads. Session 27 added a
mixture's ``window_next``, a reshard section's ``windows[].across`` and a document state's
``block_skips``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import test_red_bestfit_skipped_units as units
import test_red_skips_resumed
from openwebtext import Loader, Mixture, reshard
from records import DELETE, changed, check_one_error, get, paths, wrong_values
from test_red_bestfit_reshard_skips import Case, _layout, _loader
from test_red_mixture_reshard_skips import _run
from test_red_overrun_resume import Resharded, _every
from test_stream_schema import parse

#: The fields, by the last key of their path.
NEW = {"window_repeats", "window_slots", "pass_end", "repeats", "overrun", "window_next", "across",
       "block_skips"}


def _damages(state: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """Every damage ``records.mutants`` draws from, of the fields of ``NEW`` in ``state``."""
    out = []
    for path, keys in paths(state):
        if not any(str(k) in NEW for k in keys if isinstance(k, str)):
            continue
        for wrong in wrong_values(get(state, keys)):
            out.append((f"{path}={wrong!r}", changed(state, keys, wrong), path))
        if isinstance(keys[-1], str):
            out.append((f"{path} missing", changed(state, keys, DELETE), path))
    return out


def _holding(states: list[Any], key: str) -> dict[str, Any]:
    """The first of ``states`` whose JSON holds ``key``."""
    return next(s for s in states if f'"{key}"' in repr(s).replace("'", '"'))


def test_every_damage_of_the_new_fields_is_one_error_naming_it(tmp_path: Path) -> None:
    case = Case(2, 3, "share-middle", False, "drop", 0, 3, 1, 24, 8)
    made = Resharded(tmp_path, case, (15, 0))
    old = _every(_loader(made.layout, case, 0, 2), case)[1]
    new = [made.news[0], *_every(made.loader(0), case, made.news[0])[1]]
    mixed = Case(2, 1, "in-window", False, None, 0, 3, 1, 24, 8)  # (a skip inside a window)
    layout = _layout(tmp_path, mixed)
    mixture_state = _run(Mixture({"x": layout.corpus}), mixed, 1, 2, None, 2)[1]
    inside = Case(2, 1, "share-start", False, "drop", 0, 3, 1, 24, 8)  # (a pass repeating)
    layout = _layout(tmp_path, inside)
    olds = [_every(_loader(layout, inside, r, 2), inside)[1] for r in range(2)]
    in_pass = reshard([_holding(olds[0], "pass_end"), olds[1][0]], 1, even="drop")[0]
    (tmp_path / "u").mkdir()  # (a part's window across its epoch end, after skipped slots)
    crossing = Mixture({"x": units._corpus(tmp_path / "u", "c")})
    ranks = [units._run(crossing, r, 2, epochs=2)[1] for r in range(2)]
    across = _holding(ranks[1], "window_next")
    dealt = reshard([ranks[0][5], across], 1, even=None)[0]
    skips = test_red_skips_resumed._corpus(tmp_path / "s", {"a": 6}, {"a1", "a4"})
    with Loader(skips, workers=0, on_error="skip").iter() as it:
        in_block = _holding([it.state_dict() for _ in it], "block_skips")
    states = [_holding(old, "window_repeats"), in_pass, _holding(new, "repeats"),
              _holding(new, "overrun"), mixture_state, across, dealt, in_block]  # fmt: skip
    damaged = [d for state in states for d in _damages(state)]
    assert {p.rsplit(".", 1)[-1].split("[")[0] for _, _, p in damaged} >= NEW  # each is reached
    for damage in damaged:
        check_one_error(parse, damage)
