"""Red team, session 29: reshards at an epoch's edge.

- States all at the very start of an epoch no old rank began (each ran its epoch to the end):
  that epoch is the new world size's own, as a fresh run's (it was cut as the rest of the old
  shares, then again: under ``drop`` two documents lost, one counted).
- A rank whose share is empty (fewer documents than ranks) passes a finite run's epochs with
  no document: its state reshards (it was refused as "never differ so in epoch").
- Best-fit states resharded again, one rank at the very start of the next epoch with no row of
  it out, as the refusal's own message allows: resharded, every piece once (it was refused).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openwebtext import Loader, reshard
from openwebtext.synth import write_corpus
from test_stream_reshard import FIT_S, FIT_WINDOW, fit_pieces, options, read
from test_stream_reshard import varied as varied  # (the fixture)


@pytest.mark.parametrize("rule", ["drop", None])
@pytest.mark.parametrize(("world", "new_world"), [(3, 2), (1, 3)])
def test_an_epoch_no_old_rank_began_is_the_new_world_s_own(
    rule: str | None, world: int, new_world: int, varied: Path
) -> None:
    states = [read(varied, None, **options(rule, world, r, epochs=1))[1]  # type: ignore[arg-type]
              for r in range(world)]  # fmt: skip
    assert all(s["position"] == {"epoch": 1, "block": 0, "in_block": 0} for s in states)
    for r, state in enumerate(reshard(states, new_world, even=rule)):
        opts = options(rule, new_world, r)  # type: ignore[arg-type]
        names, _, stats = read(varied, state, **{**opts, "epochs": 2})
        fresh, _, want = read(varied, None, **{**opts, "epoch": 1, "epochs": 1})
        assert names == fresh, r
        assert (stats.dropped_documents, stats.repeated_documents) == (
            want.dropped_documents, want.repeated_documents)  # fmt: skip


def test_a_rank_whose_share_is_empty_reshards(tmp_path: Path) -> None:
    corpus = tmp_path / "two"
    write_corpus(corpus, subsets=1, members=1, docs=2, seed=2)
    opts: dict[str, Any] = {"workers": 0, "seed": 0, "even": None, "epochs": 1}
    states, handed = [], []
    for r in range(3):  # rank 0's share is empty: it runs its epoch to the end at once
        with Loader(corpus, rank=r, world_size=3, **opts).iter() as docs:
            handed += [d.name for d in docs] if r == 0 else []
            states.append(docs.state_dict())
    assert states[0]["position"]["epoch"] == 1 and not handed
    for new_world in (2, 3, 5):
        got = list(handed)
        for r, state in enumerate(reshard(states, new_world, even=None)):
            with Loader(corpus, rank=r, world_size=new_world, **opts).iter(state=state) as docs:
                got += [d.name for d in docs]
        with Loader(corpus, **opts).iter() as docs:
            assert sorted(got) == sorted(d.name for d in docs), new_world


def _fit(corpus: Path, state: Any, n: int | None, pieces: dict[Any, Any], **opts: Any
         ) -> tuple[list[tuple[str, int]], Any]:  # fmt: skip
    """``fit_delivered`` of batches of one row (a run to its end leaves no row out)."""
    got, k, later = [], 0, state
    with Loader(corpus, tokenizer="bytes", **opts).batches(
        FIT_S, 1, state=state, segments=True, packing="bestfit", window=FIT_WINDOW
    ) as batches:
        for k, batch in enumerate(batches if n != 0 else (), 1):
            tokens, seg, pos = (a[0] for a in batch[:3])
            for s in range(1, int(seg.max()) + 1):
                at = np.flatnonzero(seg == s)
                got.append(pieces[(int(pos[at[0]]), tokens[at].astype(np.uint16).tobytes())])
            if n is not None and k >= n:
                break
        later = json.loads(json.dumps(batches.state_dict()))
    return got, later


def test_bestfit_resharded_again_with_a_rank_at_the_next_epoch_s_start(varied: Path) -> None:
    pieces = fit_pieces(varied, None, 1)  # type: ignore[arg-type]
    got, state = _fit(varied, None, 3, pieces, **options(None, 1, 0))  # type: ignore[arg-type]
    states = []
    for r, n in enumerate([None, 2]):  # new rank 0 to the epoch's end, no row of the next out
        opts = options(None, 2, r, epochs=1)  # type: ignore[arg-type]
        out, later = _fit(varied, reshard([state], 2, even=None)[r], n, pieces, **opts)
        got += out
        states.append(later)
    assert [s["documents"]["position"]["epoch"] for s in states] == [1, 0]
    for r, again in enumerate(reshard(states, 3, even=None)):
        got += _fit(varied, again, None, pieces, **options(None, 3, r, epochs=1))[0]  # type: ignore
    assert sorted(got) == sorted(set(pieces.values()))  # every piece once


def test_a_rest_s_position_past_its_slots_with_no_skip_is_refused(varied: Path) -> None:
    """A resharded state's ``in_block`` (its share's slots passed with no document handed out)
    with no skip counted: no run is there (red team, session 29: 7 or 2**63-1 was taken, the
    first documents moved to the end and counted as repeats)."""
    from openwebtext import StateError

    olds = [read(varied, None, n, **options("pad", 2, r))[1] for r, n in enumerate((30, 45))]
    new = reshard(olds, 3)[1]
    genuine = read(varied, new, **options("pad", 3, 1))[0]
    assert genuine and new["position"]["in_block"] == 0
    for value in (7, 2**63 - 1):
        edited = json.loads(json.dumps(new))
        edited["position"]["in_block"] = value
        with pytest.raises(StateError, match="slots of the rest") as info:
            read(varied, edited, **options("pad", 3, 1))
        assert info.value.field == "position.in_block"


def test_a_split_key_past_8_bytes_is_refused_naming_the_field(varied: Path) -> None:
    """``val_seed`` of a state or a run's config as ``Options`` bounds it (red team, session
    29: ``owt stream --resume`` said "val_seed must be …", naming neither file nor field)."""
    from openwebtext import StateError
    from openwebtext.stream.schema import DocumentState

    state = read(varied, None, 2, **options("drop", 1, 0))[1]
    state["config"]["val_seed"] = 2**64
    with pytest.raises(StateError, match=r"not < 2\*\*64") as info:
        DocumentState.from_json(state)
    assert info.value.field == "config.val_seed"
    state["config"]["val_seed"] = 2**64 - 1
    assert DocumentState.from_json(state).config.val_seed == 2**64 - 1
