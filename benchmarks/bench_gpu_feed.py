"""The GPU check of issue 37: a small GPT trained from ``Loader.batches`` (best fit, segments),
with and without the device stage (``openwebtext.torch.to_device``), and the first batch with
and without ``start()``. Prints ONE JSON line.

For each feed, a fresh model (same seed) trains ``--steps`` steps after ``--warmup`` steps:

- ``plain``: the loop users write: ``torch.from_numpy(batch.tokens).to(device)`` per array (a
  pageable copy: the host waits for the device before every step);
- ``stage``: ``to_device(batches, device, depth=--depth)`` started before the model is built
  (a thread packs and copies ahead from pinned buffers on a side stream; the step's stream
  waits on an event).

Per step, CUDA events recorded before asking for the batch, once it is on the device, and after
the optimizer step give the time the device spent waiting on data (between the first two) as a
share of the step; tokens/s is over the measured steps (wall time, synchronized at both ends),
counting every position of the rows (padding included: best fit pads a few per mille). On a CPU
(``--smoke``, or no CUDA) the same with ``time.perf_counter`` in place of events.

Precision: bf16 autocast on a GPU of compute capability 8 or more (Ampere and later); on an
older GPU, where bf16 is emulated (slow), and on a CPU, fp32 (fp16 would need a GradScaler to
be correct: fp32 is the simplest correct choice). The report says which (``precision``). The
defaults (16 rows of 1024, a vocabulary of 50304) want a GPU of more than 12 GB; on a smaller
one, ``--batch-size 8`` (what ``benchmarks/gpu_checks.sh`` runs, with fewer steps).

The first batch: the device stage made, then ``next()`` at once (``cold``: the workers start,
read and tokenize best fit's first window of documents, pack it), and made, ``start()``-ed,
``--sleep`` seconds asleep as if a checkpoint were loading, then ``next()`` (``started``).

    python benchmarks/bench_gpu_feed.py [CORPUS ...] [--steps N] [--batch-size N] [--workers N]
    python benchmarks/bench_gpu_feed.py CORPUS --smoke      # seconds, on a CPU (the tests)

With no CORPUS, a generated corpus (``openwebtext.synth``: 1 subset x 24 members x 200
documents) is written once into the cache folder; the GPT-2 tokenizer is the offline one
(``tokenizer="gpt2"``, from the ``tokenize`` extra): nothing is downloaded. On one GPU and 16
cores it runs in about two minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from openwebtext import Loader
from openwebtext.tokenizer import load_tokenizer
from openwebtext.torch import document_mask, to_device


class Block(nn.Module):
    """A pre-norm transformer block: attention within each document, then a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token embeddings, positions within each document, ``layers`` blocks, a tied head."""

    def __init__(self, vocab: int, seq_len: int, layers: int, heads: int, width: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq_len + 1, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        tokens, segments = batch["tokens"], batch["segment_ids"]
        x, y = tokens[:, :-1], tokens[:, 1:].masked_fill(segments[:, 1:] == 0, -100)
        mask = document_mask(segments[:, :-1])
        # A piece of a document longer than a row goes on counting from the piece before it.
        positions = batch["positions"][:, :-1].clamp_max(self.positions.num_embeddings - 1)
        h = self.tokens(x) + self.positions(positions)
        for block in self.blocks:
            h = block(h, mask)
        logits = self.head(self.ln(h))
        return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1), ignore_index=-100)


def plain_feed(batches: Any, device: torch.device) -> Iterator[dict[str, torch.Tensor]]:
    """The loop users write without the stage: each array copied to the device as it comes."""
    for batch in batches:
        arrays = batch._asdict().items()  # sources: None for one corpus
        yield {name: torch.from_numpy(a).to(device) for name, a in arrays if a is not None}


class Clock:
    """Marks on the device's timeline (CUDA events) or the host's (``perf_counter``)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1000 if self.cuda else float(b - a)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def batches_of(args: argparse.Namespace) -> Any:
    loader = Loader(args.corpus, tokenizer=args.tokenizer, workers=args.workers, seed=0,
                    epochs=None)  # fmt: skip
    return loader.batches(args.seq_len, args.batch_size, packing="bestfit", segments=True,
                          window=args.window)  # fmt: skip


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """bf16 on a GPU with bf16 units (compute capability 8 and later); None (fp32) elsewhere."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
        return torch.bfloat16
    return None


def train(args: argparse.Namespace, device: torch.device, stage: bool) -> dict[str, Any]:
    """Train a fresh model ``--warmup`` + ``--steps`` steps from one feed; its figures."""
    batches = batches_of(args)
    feed: Iterator[Any] = (
        to_device(batches, device, depth=args.depth).start() if stage
        else plain_feed(batches, device)
    )  # fmt: skip
    torch.manual_seed(0)
    vocab = -(-load_tokenizer(args.tokenizer).n_vocab // 64) * 64
    model = GPT(vocab, args.seq_len, args.layers, args.heads, args.width).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    low = autocast_dtype(device)
    clock, marks = Clock(device), []
    total = torch.zeros((), device=device)
    try:
        for step in range(args.warmup + args.steps):
            if step == args.warmup:
                clock.sync()
                start = time.perf_counter()
            before = clock.mark()
            batch = next(feed)
            fed = clock.mark()
            with torch.autocast(device.type, low or torch.bfloat16, enabled=low is not None):
                loss = model(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            if step >= args.warmup:
                marks.append((before, fed, clock.mark()))
        clock.sync()
        seconds = time.perf_counter() - start
    finally:
        close = getattr(feed, "close", None)
        if close is not None:
            close()
        batches.close()
    waits = [clock.seconds(a, b) for a, b, _ in marks]
    steps = [clock.seconds(a, c) for a, _, c in marks]
    tokens = args.steps * args.batch_size * args.seq_len
    return {
        "tokens_per_s": tokens / seconds,
        "data_wait_share": sum(waits) / sum(steps),
        "step_ms_median": 1000 * statistics.median(steps),
        "mean_loss": float(total) / (args.warmup + args.steps),
    }


def first_batch_ms(args: argparse.Namespace, device: torch.device, start: bool) -> float:
    """Milliseconds from ``next()`` to the first batch on the device (after ``start()`` and
    ``--sleep`` seconds, or cold)."""
    with to_device(batches_of(args), device, depth=args.depth) as feed:
        if start:
            feed.start()
            time.sleep(args.sleep)
        clock = Clock(device)
        clock.sync()
        begin = time.perf_counter()
        batch = next(feed)
        batch["tokens"].sum().item()  # on the device, usable
        return 1000 * (time.perf_counter() - begin)


def generated_corpus() -> list[str]:
    from openwebtext.files import cache_root
    from openwebtext.synth import COMPLETE_MARKER, corpus_dirname, write_corpus

    path = cache_root() / corpus_dirname(1, 24, 200, 0)
    if not (path / COMPLETE_MARKER).is_file():
        print(f"generating a corpus in {path} ...", file=sys.stderr, flush=True)
        write_corpus(path, subsets=1, members=24, docs=200, seed=0, workers=os.cpu_count())
    return [str(path)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("corpus", nargs="*", help="corpus paths (none: a generated corpus in the cache)")
    add("--smoke", action="store_true", help="a tiny run on the CPU, in seconds (the tests)")
    add("--device", help="cuda or cpu (default: cuda if there is one)")
    add("--steps", type=int, default=300, help="measured steps per feed")
    add("--warmup", type=int, default=30, help="steps before measuring")
    add("--seq-len", type=int, default=1024)
    add("--batch-size", type=int, default=16)
    add("--layers", type=int, default=6)
    add("--heads", type=int, default=6)
    add("--width", type=int, default=384)
    add("--tokenizer", default="gpt2")
    add("--window", type=int, default=4096, help="best fit's window of documents")
    add("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    add("--depth", type=int, default=2, help="the device stage's batches ahead")
    add("--sleep", type=float, default=3.0, help="seconds between start() and the first next()")
    args = parser.parse_args(argv)
    if args.smoke:
        smoke = dict(steps=6, warmup=2, seq_len=64, batch_size=2, layers=1, heads=2, width=32,
                     tokenizer="bytes", window=64, workers=1, sleep=0.5, device="cpu")  # fmt: skip
        for name, value in smoke.items():
            setattr(args, name, value)
    args.corpus = args.corpus or generated_corpus()
    return args


def main() -> None:
    args = parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    began = time.perf_counter()
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "timer": "cuda-events" if device.type == "cuda" else "perf_counter",
        "cores": os.cpu_count(),
        "precision": str(autocast_dtype(device) or torch.float32).removeprefix("torch."),
        **{k: getattr(args, k) for k in ("steps", "warmup", "seq_len", "batch_size", "layers",
                                         "width", "tokenizer", "workers", "depth", "window")},
    }  # fmt: skip
    report["first_batch_ms"] = {
        "cold": first_batch_ms(args, device, start=False),
        "started": first_batch_ms(args, device, start=True),
        "sleep_s": args.sleep,
    }
    for name, stage in (("plain", False), ("stage", True)):
        print(f"training from the {name} feed ...", file=sys.stderr, flush=True)
        report[name] = train(args, device, stage)
    report["stage_over_plain_tokens_per_s"] = (
        report["stage"]["tokens_per_s"] / report["plain"]["tokens_per_s"]
    )
    report["seconds"] = time.perf_counter() - began
    print(json.dumps(report))


if __name__ == "__main__":
    main()
