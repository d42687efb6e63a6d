"""The resumable state of a document stream: a small, JSON-safe, versioned dict.

A state says where the stream is — ``(epoch, block, in_block)``: the epoch, the
plan position of the first unit of the current shuffle block, and how many of
that block's documents were handed out — plus running counts. It belongs to the
last document the consumer was given, never to what the workers have read ahead.

``config`` is what must match to resume: the corpus fingerprint and the options
that shape the stream. Everything else (workers, prefetch, take, timeouts) may
change between runs without changing the documents that follow.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .errors import StateError
from .options import Options

__all__ = ["STATE_FORMAT", "check_state", "load_state", "stream_config"]

STATE_FORMAT = "openwebtext-state/1"

#: Options that change which documents come in which order.
SHAPING = (
    "shuffle",
    "seed",
    "shuffle_buffer",
    "rank",
    "world_size",
    "even",
    "split",
    "val_fraction",
    "val_seed",
    "max_document_bytes",
)


def stream_config(
    fingerprint: str, units: int, options: Options, *, tokenizer: str | None = None
) -> dict[str, Any]:
    """What a state must agree with to resume a stream.

    ``tokenizer`` is the vocabulary's fingerprint when the
    stream hands out token ids: a state counts tokens, and a packer's state
    cuts inside a document's ids.
    """
    config: dict[str, Any] = {"corpus": fingerprint, "units": units}
    for name in SHAPING:
        config[name] = getattr(options, name)
    config["even"] = options.even_mode
    config["tokenizer"] = tokenizer
    return config


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a state saved as JSON (``owt stream --state-out``) and check its shape.

    Raises:
        StateError: the file cannot be read, is not JSON, or is not a state; the
            message names the file.
    """
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read())
    except OSError as exc:
        raise StateError(
            f"{os.fspath(path)}: cannot read the state: {exc.strerror or exc}"
        ) from exc
    except ValueError as exc:  # not JSON, or not UTF-8
        raise StateError(f"{os.fspath(path)}: not a JSON state file: {exc}") from exc
    try:
        return check_shape(state)
    except StateError as exc:
        raise StateError(f"{os.fspath(path)}: {exc}") from None


def check_shape(state: Any) -> dict[str, Any]:
    """Check that ``state`` has the fields and types of a state; return it.

    Raises:
        StateError: not a state of this format, or a field of the wrong type.
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise StateError(f"not an openwebtext state of format {STATE_FORMAT!r} (found {found!r})")
    for part in ("config", "position", "counters"):
        if part in state and not isinstance(state[part], dict):
            raise StateError(f"bad state: {part} is {_kind(state[part])}, not an object")
    position = state.get("position", {})
    for key in ("epoch", "block", "in_block"):
        value = position.get(key)
        if not _count(value):
            raise StateError(f"bad state: position.{key} is {value!r}, not an int >= 0")
    for key, value in state.get("counters", {}).items():
        if not _count(value):
            raise StateError(f"bad state: counters.{key} is {value!r}, not an int >= 0")
    return state


def check_state(state: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Validate a saved state against this stream's ``config``; return it.

    Raises:
        StateError: not a state of this format, made with another corpus or
            other shaping options (the message names every difference), or a
            position past the end of the plan.
    """
    check_shape(state)
    saved = state.get("config", {})
    differ = [
        f"{key}: saved {saved.get(key)!r}, now {value!r}"
        for key, value in config.items()
        if saved.get(key) != value
    ]
    if differ:
        raise StateError("the state was saved for another stream; " + "; ".join(differ))
    position = state["position"]
    if config.get("even") is None:  # evened-out ranks may wrap around their shard
        units = len(range(config["rank"], config["units"], config["world_size"]))
        block, in_block = position["block"], position["in_block"]
        if block > units or (block == units and in_block > 0):
            raise StateError(
                f"bad state: position block={block}, in_block={in_block} lies past the end "
                f"of the plan ({units} members for rank {config['rank']})"
            )
    checked: dict[str, Any] = state
    return checked


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
