"""The device stage: batches as tensors on the training device, ``depth`` batches ahead.

A thread takes batches from the source (``Loader.batches``, a ``StatefulDataLoader``, ...),
notes the source's state after each, and puts them on the device: on CUDA it copies each batch
into a slot of a small ring of pinned host buffers and from there to the device with
``non_blocking`` copies on a side stream, recording an event after them. The consumer's stream
waits on that event (``Stream.wait_event``: no ``synchronize`` in the training loop), and a ring
slot is written again only once the event of the copy that read it has passed. On a CPU the
batches are the source's arrays as tensors (no copy, no pinning, no streams).

The state handed out is the batch's: ``state_dict()`` is the source's state after the last batch
the consumer took, never where the thread has read ahead to (the batches in flight are read
again on resume). ``start()`` starts the source and fills the queue before the first batch is
asked for, e.g. while a checkpoint loads.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, Protocol, cast

import numpy as np
import torch

from openwebtext.loader import PackedBatch
from openwebtext.options import int_at_least

__all__ = ["DeviceBatches", "to_device"]

#: How often (seconds) a thread waiting on a full queue checks whether it should stop.
POLL = 0.05


class Stateful(Protocol):
    """What the device stage reads from: batches (an iterator or an iterable) with a state."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...


class Ready(NamedTuple):
    """A batch on the device, with the source's state after it."""

    names: tuple[str, ...] | None  # the fields of a PackedBatch or the keys of a dict
    tensors: list[torch.Tensor]
    copied: torch.cuda.Event | None  # recorded on the side stream after the copies
    state: dict[str, Any]


class Failed(NamedTuple):
    error: BaseException


END = object()


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
    if isinstance(batch, PackedBatch):
        names, values = batch._fields, list(batch)
    elif isinstance(batch, dict):
        names, values = tuple(batch), list(batch.values())
    else:
        names, values = None, [batch]
    tensors = [torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in values]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        kinds = sorted({type(t).__name__ for t in tensors})
        raise TypeError(f"the device stage takes arrays or tensors, not {', '.join(kinds)}")
    return names, tensors


class Producer:
    """The thread's side: owns the source from its start to its close."""

    def __init__(self, source: Stateful, device: torch.device, depth: int) -> None:
        self.source = source
        self.device = device
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if cuda else None  # type: ignore[no-untyped-call]
        self.ring = [Slot() for _ in range(depth + 1)] if cuda else []
        self.turn = 0
        self.thread = threading.Thread(target=self.run, name="openwebtext-to-device", daemon=True)

    def run(self) -> None:
        try:
            if self.stream is not None:
                torch.cuda.set_device(self.device)
            batches = iter(self.source)
            while not self.stopping.is_set():  # checked before reading on: a close reads no more
                batch = next(batches, END)
                if batch is END:
                    self.put(END)
                    return
                self.put(self.moved(batch, self.source.state_dict()))
        except BaseException as error:  # handed to the consumer, raised there
            self.put(Failed(error))
        finally:
            close_source(self.source)

    def moved(self, batch: Any, state: dict[str, Any]) -> Ready:
        names, tensors = as_tensors(batch)
        if self.stream is None:
            return Ready(names, [t.to(self.device) for t in tensors], None, state)
        slot = self.ring[self.turn % len(self.ring)]
        self.turn += 1
        host = slot.fill(tensors)
        with torch.cuda.stream(self.stream):
            moved = [b.to(self.device, non_blocking=True) for b in host]
            copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
            copied.record(self.stream)
        slot.copied = copied
        return Ready(names, moved, copied, state)

    def put(self, item: Any) -> bool:
        """Queue ``item``, waiting for room; False if the stage is stopping."""
        while not self.stopping.is_set():
            try:
                self.ready.put(item, timeout=POLL)
                return True
            except queue.Full:
                continue
        return False

    def stop(self) -> None:
        """Ask the thread to end, and wait until it has (it closes the source)."""
        self.stopping.set()
        if self.thread.ident is None:
            close_source(self.source)
            return
        while self.thread.is_alive():
            self.drain()
            self.thread.join(POLL)
        self.drain()

    def drain(self) -> None:
        try:
            while True:
                self.ready.get_nowait()
        except queue.Empty:
            pass


def close_source(source: Any) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


class DeviceBatches:
    """Batches of a source as tensors on ``device``, up to ``depth`` ready ahead (``to_device``).

    Yields a tensor for an array, and a dict of tensors for a ``PackedBatch`` (``tokens``,
    ``segment_ids``, ``positions``) or a dict, as ``PackedBatchDataset`` does. On CUDA the
    tensors may be used at once on the current stream (it waits for their copy); on another
    stream, call ``tensor.record_stream`` as for any tensor made on another stream.

    Args:
        batches: ``Loader.batches(...)``, a ``StatefulDataLoader``, or any iterable of batches
            with a ``state_dict()`` (its state after the last batch it gave).
        device: Where the batches go (``cuda``, ``cuda:1``, ``cpu``, ...).
        depth: Batches made and copied ahead (at most; the source's own read ahead aside).

    Raises:
        ValueError: ``depth`` is not an int >= 1.
    """

    def __init__(self, batches: Stateful, device: torch.device | str, depth: int = 2) -> None:
        if not int_at_least(depth, 1):
            raise ValueError(f"depth must be an int >= 1, not {depth!r}")
        place = torch.device(device)
        if place.type == "cuda" and place.index is None:
            place = torch.device("cuda", torch.cuda.current_device())
        self.device = place
        self.depth = depth
        self._source = batches
        self._producer = Producer(batches, place, depth)
        self._state: dict[str, Any] | None = None  # after the last batch handed out
        self._ended = False

    def start(self) -> DeviceBatches:
        """Start the source and make the first ``depth`` batches now, in the background (e.g.
        while a checkpoint loads). Safe to call again; ``next()`` starts it too."""
        producer = self._producer
        if producer.thread.ident is None and not producer.stopping.is_set():
            self._state = self._source.state_dict()  # nothing handed out: the state at start
            producer.thread.start()
        return self

    def __iter__(self) -> DeviceBatches:
        return self

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        self.start()
        item = self._producer.ready.get()
        if isinstance(item, Failed):
            self.close()
            raise item.error
        if item is END:
            self.close()
            raise StopIteration
        if item.copied is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(item.copied)
            for tensor in item.tensors:
                tensor.record_stream(current)  # made on the side stream, used on this one
        self._state = item.state
        if item.names is None:
            return item.tensors[0]
        return dict(zip(item.names, item.tensors, strict=True))

    @property
    def ready(self) -> int:
        """Batches made and on their way to the device, not yet handed out."""
        return self._producer.ready.qsize()

    def state_dict(self) -> dict[str, Any]:
        """The source's state after the last batch handed out (before any: where it starts)."""
        if self._state is None:
            return self._source.state_dict()
        return self._state

    @property
    def stats(self) -> Any:
        """The source's ``stats`` (``Loader.batches``'), read ahead included (the batches in
        flight)."""
        return self._source.stats  # type: ignore[attr-defined]

    def close(self) -> None:
        """Stop the thread and the source now. Safe to call twice."""
        self._ended = True
        self._producer.stop()

    def __enter__(self) -> DeviceBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        producer = getattr(self, "_producer", None)  # None: __init__ refused its arguments
        if producer is not None:
            producer.stopping.set()  # an abandoned stage: the thread closes the source


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
    if not callable(getattr(batches, "state_dict", None)):
        raise TypeError(f"the device stage needs batches with a state_dict(), not {batches!r}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return DeviceBatches(cast(Stateful, batches), device, depth)
