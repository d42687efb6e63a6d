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

from typing import Any

from .errors import StateError
from .options import Options

__all__ = ["STATE_FORMAT", "check_state", "stream_config"]

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


def check_state(state: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Validate a saved state against this stream's ``config``; return it.

    Raises:
        StateError: not a state of this format, or made with another corpus or
            other shaping options; the message names every difference.
    """
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise StateError(f"not an openwebtext state of format {STATE_FORMAT!r} (found {found!r})")
    saved = state.get("config", {})
    differ = [
        f"{key}: saved {saved.get(key)!r}, now {value!r}"
        for key, value in config.items()
        if saved.get(key) != value
    ]
    if differ:
        raise StateError("the state was saved for another stream; " + "; ".join(differ))
    position = state.get("position", {})
    for key in ("epoch", "block", "in_block"):
        if not isinstance(position.get(key), int) or position[key] < 0:
            raise StateError(f"bad state: position.{key} is {position.get(key)!r}")
    return state
