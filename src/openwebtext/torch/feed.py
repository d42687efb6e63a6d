"""The device stage: batches as tensors on the training device, ``depth`` batches ahead.

Batches are made ahead on a thread (``openwebtext.Ahead``: the state handed out is the
batch's, ``start()`` begins before the first batch). On CUDA the thread copies each batch into
a slot of a small ring of pinned host buffers and from there to the device with
``non_blocking`` copies on a side stream, recording an event after them; the consumer's stream
waits on that event (``Stream.wait_event``: no ``synchronize`` in the training loop), and a ring
slot is written again only once the event of the copy that read it has passed. On a CPU the
batches are the source's arrays as tensors (no copy, no pinning, no streams).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, cast

import numpy as np
import torch

from openwebtext.loader import Ahead, PackedBatch, Stateful

__all__ = ["DeviceBatches", "to_device"]


class Moved(NamedTuple):
    """A batch on (or on its way to) the device."""

    names: tuple[str, ...] | None  # the fields of a PackedBatch or the keys of a dict
    tensors: list[torch.Tensor]
    copied: torch.cuda.Event | None  # recorded on the side stream after the copies


class Slot:
    """Pinned host buffers of one batch (one per tensor), reused once their copy is done."""

    def __init__(self) -> None:
        self.buffers: list[torch.Tensor] = []
        self.copied: torch.cuda.Event | None = None

    def fill(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.copied is not None:
            self.copied.synchronize()  # the copy that read these buffers has finished
        fits = [(b.shape, b.dtype) for b in self.buffers] == [(t.shape, t.dtype) for t in tensors]
        if not fits:
            self.buffers = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
        for buffer, t in zip(self.buffers, tensors, strict=True):
            buffer.copy_(t)
        return self.buffers


def as_tensors(batch: Any) -> tuple[tuple[str, ...] | None, list[torch.Tensor]]:
    """The names (None for a bare array) and the tensors of a batch: an array or tensor, a
    ``PackedBatch`` or a dict of them."""
    if isinstance(batch, PackedBatch):  # without ``sources`` when it is None (one corpus)
        fields = [(n, v) for n, v in zip(batch._fields, batch, strict=True) if v is not None]
        names, values = tuple(n for n, _ in fields), [v for _, v in fields]
    elif isinstance(batch, dict):
        names, values = tuple(batch), list(batch.values())
    else:
        names, values = None, [batch]
    tensors = [torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in values]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        kinds = sorted({type(t).__name__ for t in tensors})
        raise TypeError(f"the device stage takes arrays or tensors, not {', '.join(kinds)}")
    return names, tensors


def placed(device: torch.device | str) -> torch.device:
    """``device`` as a torch device, one torch can copy to here (``cuda``: the current one).

    Raises:
        ValueError: naming ``device``: not a device, or none torch can copy to here (CUDA
            without CUDA, an index past the devices); torch's own RuntimeError or
            AssertionError came from the thread, or from ``torch.cuda``, before.
    """
    try:
        place = torch.device(device)
        if place.type == "cuda" and place.index is None:
            place = torch.device("cuda", torch.cuda.current_device())
        torch.empty(0).to(place)
    except (RuntimeError, AssertionError, TypeError) as exc:
        why = str(exc).strip().splitlines() or [repr(exc)]
        raise ValueError(f"device {device!r} is not one torch can copy batches to here: "
                         f"{why[0]}") from None  # fmt: skip
    return place


class Mover:
    """How batches reach ``device``: ``move`` in the thread, ``receive`` in the consumer."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if cuda else None  # type: ignore[no-untyped-call]
        self.ring: list[Slot] = []  # CUDA: depth + 1 slots (``depth`` queued, one being made)
        self.turn = 0

    def move(self, batch: Any) -> Moved:
        names, tensors = as_tensors(batch)
        if self.stream is None:
            return Moved(names, [t.to(self.device) for t in tensors], None)
        if self.turn == 0:
            torch.cuda.set_device(self.device)  # the thread's own current device
        slot = self.ring[self.turn % len(self.ring)]
        self.turn += 1
        host = slot.fill(tensors)
        with torch.cuda.stream(self.stream):
            moved = [b.to(self.device, non_blocking=True) for b in host]
            copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            copied.record(self.stream)
        slot.copied = copied
        return Moved(names, moved, copied)

    def receive(self, moved: Moved) -> Any:
        if moved.copied is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(moved.copied)
            for tensor in moved.tensors:
                tensor.record_stream(current)  # made on the side stream, used on this one
        if moved.names is None:
            return moved.tensors[0]
        return dict(zip(moved.names, moved.tensors, strict=True))


class DeviceBatches(Ahead):
    """Batches of a source as tensors on ``device``, up to ``depth`` ready ahead (``to_device``).

    Yields a tensor for an array, and a dict of tensors for a ``PackedBatch`` (``tokens``,
    ``segment_ids``, ``positions``) or a dict, as ``PackedBatchDataset`` does. On CUDA the
    tensors may be used at once on the current stream (it waits for their copy); on another
    stream, call ``tensor.record_stream`` as for any tensor made on another stream.
    ``state_dict()``, ``start()``, ``ready``, ``stats`` and ``close()`` are ``Ahead``'s.

    Args:
        batches: ``Loader.batches(...)``, a ``StatefulDataLoader``, or any iterable of batches
            with a ``state_dict()`` (its state after the last batch it gave).
        device: Where the batches go (``cuda``, ``cuda:1``, ``cpu``, ...).
        depth: Batches made and copied ahead (at most; the source's own read ahead aside).

    Raises:
        ValueError: ``depth`` is not an int >= 1, or ``device`` is not one torch can copy to
            here (``placed``).
        TypeError: ``batches`` has no ``state_dict()``.
    """

    def __init__(self, batches: Stateful, device: torch.device | str, depth: int = 2) -> None:
        self.device = place = placed(device)
        mover = Mover(place)
        super().__init__(batches, depth, move=mover.move, receive=mover.receive)
        if mover.stream is not None:
            mover.ring = [Slot() for _ in range(self.depth + 1)]


def to_device(
    batches: Stateful | Iterable[Any], device: torch.device | str | None = None, depth: int = 2
) -> DeviceBatches:
    """Batches as tensors on ``device`` (None: CUDA if there is one, else the CPU), ``depth``
    batches made and copied ahead on a thread: see ``DeviceBatches``.

    Example::

        batches = to_device(loader.batches(1024, 8, packing="bestfit", segments=True), "cuda")
        batches.start()                          # the workers start while the model loads
        model.load_state_dict(torch.load(path)["model"])
        for batch in batches:
            x, y = batch["tokens"][:, :-1], batch["tokens"][:, 1:]
            ...
            torch.save({"model": model.state_dict(), "data": batches.state_dict()}, path)
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return DeviceBatches(cast(Stateful, batches), device, depth)
