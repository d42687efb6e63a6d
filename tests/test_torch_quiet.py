"""Building a StatefulDataLoader over our datasets prints nothing of torchdata's (issue 39)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torchdata")

# One process: a loader built before openwebtext.torch is imported (does this torchdata warn
# at all?), then one after (catch_warnings also resets the once-per-place registries).
BUILD = """
import json, warnings
from torchdata.stateful_dataloader import StatefulDataLoader
def said():
    with warnings.catch_warnings(record=True) as caught:
        StatefulDataLoader(list(range(4)), batch_size=2)
    return [str(w.message) for w in caught]
before = said()
import openwebtext.torch
print(json.dumps([before, said()]))
"""


def test_torchdata_set_vital_warning_is_not_printed() -> None:
    done = subprocess.run([sys.executable, "-W", "default", "-c", BUILD], capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    if not any("set_vital" in m for m in before):
        pytest.skip("this torch and torchdata do not warn about set_vital")
    assert not any("set_vital" in m for m in after), after
