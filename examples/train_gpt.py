"""Train a small GPT on packed GPT-2 token batches streamed from a corpus; resume exactly.

The model is a plain-PyTorch GPT (a few pre-norm transformer blocks, tied embeddings), small
enough to train on a CPU for a few hundred steps. The data is the corpus streamed through
``openwebtext.torch.PackedBatchDataset``: documents tokenized with GPT-2's BPE in the
DataLoader workers and packed into rows of ``seq_len + 1`` ids, with no files written first.
Every ``--eval-every`` steps it reports the loss on fixed batches of the held-out
``split="val"`` documents. Model, optimizer, random state and the ``StatefulDataLoader``
state are saved together in one checkpoint file, replaced atomically; run the same command
again after an interruption and it continues from the last checkpoint, reaching exactly the
losses of a run that was never interrupted (one thread, deterministic kernels).

With CUDA, the model trains on the GPU and the batches reach it through the device stage
(``openwebtext.torch.to_device``): made ahead on a thread, copied from pinned buffers on a side
stream, started while the checkpoint loads; the checkpoint holds the state of the batch last
trained on. Without CUDA, on the CPU as before.

    python examples/train_gpt.py CORPUS --steps 300 --checkpoint gpt.pt
    python examples/train_gpt.py CORPUS --steps 300 --checkpoint gpt.pt   # continues

With no CORPUS, a small generated corpus (``openwebtext.synth``, 3,200 documents) is written
once into the cache folder. Needs ``pip install -e '.[torch,tokenize]'``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torchdata.stateful_dataloader import StatefulDataLoader

from openwebtext import Corpus, Loader
from openwebtext.torch import PackedBatchDataset, document_mask, to_device

VOCAB = 50304  # GPT-2's 50257 ids, padded to a multiple of 64 as nanoGPT does

# The arguments that decide the result: a checkpoint resumes only under the same ones.
RUN_ARGS = (
    "corpus",
    "steps",
    "seq_len",
    "batch_size",
    "layers",
    "heads",
    "width",
    "lr",
    "warmup",
    "val_fraction",
    "eval_batches",
    "num_workers",
    "seed",
    "segments",
    "packing",
)


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # --segments: each document attends only to itself
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm, tied output head."""

    def __init__(self, seq_len: int, layers: int, heads: int, width: int) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"--width {width} must be a multiple of --heads {heads}")
        self.tokens = nn.Embedding(VOCAB, width)
        self.positions = nn.Embedding(seq_len, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.head.weight = self.tokens.weight
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mean cross-entropy of predicting ``y`` from ``x`` (both ``(batch, seq_len)``;
        targets -100 are ignored), attention under ``mask`` (None: causal)."""
        h = self.tokens(x) + self.positions(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            h = block(h, mask)
        logits = self.head(self.ln(h))
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=-100)


def inputs(batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(x, y, mask)`` of a batch: with ``--segments`` (a dict of tensors) the block-diagonal
    causal mask of its documents, and padding targets ignored."""
    if not isinstance(batch, dict):
        return batch[:, :-1], batch[:, 1:], None
    tokens, segments = batch["tokens"], batch["segment_ids"]
    y = tokens[:, 1:].masked_fill(segments[:, 1:] == 0, -100)
    return tokens[:, :-1], y, document_mask(segments[:, :-1])


def as_tensors(batch: Any, device: torch.device) -> Any:
    """A batch of ``Loader.batches`` as the train DataLoader gives it: tensors (on ``device``)."""
    if isinstance(batch, tuple):  # a PackedBatch (--segments)
        arrays = batch._asdict().items()  # sources: None for one corpus
        return {name: torch.from_numpy(a).to(device) for name, a in arrays if a is not None}
    return torch.from_numpy(batch).to(device)


def cut_log(path: Path, step: int) -> None:
    """Cut ``--log`` back to the steps up to ``step`` (the checkpoint's, 0 without one): the
    steps run after the last checkpoint are run again, and logged once."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines(keepends=True)
            if line.strip() and int(line.split()[0]) <= step]  # fmt: skip
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text("".join(kept))
    os.replace(temp, path)


def learning_rate(step: int, args: argparse.Namespace) -> float:
    """Linear warmup, then cosine decay to a tenth at ``--steps``: a function of the step only,
    so a resumed run follows the same schedule."""
    if step < args.warmup:
        return float(args.lr * (step + 1) / args.warmup)
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return float(args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0)))))


@torch.no_grad()
def evaluate(model: GPT, batches: list[Any]) -> float:
    model.eval()
    losses = [model(*inputs(b)).item() for b in batches]
    model.train()
    return sum(losses) / len(losses)


def save_atomically(state: dict[str, Any], path: Path) -> None:
    """Write ``state`` beside ``path`` and rename it into place: a crash leaves the old file
    or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def small_corpus() -> str:
    """The generated corpus used without CORPUS: 1 subset x 16 members x 200 documents."""
    from openwebtext.files import cache_root
    from openwebtext.synth import COMPLETE_MARKER, corpus_dirname, write_corpus

    path = cache_root() / corpus_dirname(1, 16, 200, 0)
    if not (path / COMPLETE_MARKER).is_file():
        print(f"generating a small corpus in {path} ...", flush=True)
        write_corpus(path, subsets=1, members=16, docs=200, seed=0)
    return str(path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,  # every default in --help
    )
    add = parser.add_argument
    add("corpus", nargs="*", help="corpus paths (none: a small generated corpus)")
    add("--steps", type=int, default=300, help="train until this step (the schedule's length)")
    add("--seq-len", type=int, default=128, help="ids each row predicts")
    add("--batch-size", type=int, default=8, help="rows per batch")
    add("--layers", type=int, default=2, help="transformer blocks")
    add("--heads", type=int, default=2, help="attention heads per block")
    add("--width", type=int, default=64, help="model width (a multiple of --heads)")
    add("--lr", type=float, default=3e-3, help="peak learning rate")
    add("--warmup", type=int, default=20, help="warmup steps")
    add("--val-fraction", type=float, default=0.01, help="held-out share (nanoGPT: 0.0005)")
    add("--eval-every", type=int, default=50, help="evaluate on the val split every N steps")
    add("--eval-batches", type=int, default=8, help="val batches per evaluation")
    add("--checkpoint", type=Path, default=Path("gpt-ckpt.pt"), help="the checkpoint file")
    add(
        "--checkpoint-every",
        type=int,
        help="save every N steps and at the end (None: --eval-every, at most --steps // 4, "
        "so that a short run saves before its end too)",
    )
    add("--num-workers", type=int, default=2, help="DataLoader workers (each packs its own share)")
    add("--seed", type=int, default=0, help="seed of the model's weights and the data order")
    add("--segments", action="store_true", help="mask attention at document boundaries")
    add("--packing", choices=["concat", "bestfit"], default="concat", help="how rows are filled")
    add("--log", type=Path, help="'step loss' of every step (a resume cuts it to its step)")
    add("--interrupt-at", type=int, help="stop after this step without saving (to try resuming)")
    args = parser.parse_args(argv)
    args.corpus = args.corpus or [small_corpus()]
    if args.checkpoint_every is None:
        args.checkpoint_every = max(1, min(args.eval_every, args.steps // 4))
    return args


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    if cuda:  # cuBLAS is deterministic only with a fixed workspace, set before it starts
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # Deterministic: the same seed, one thread, and kernels that never vary between runs (on
    # a GPU, where some attention kernels have no deterministic version, as far as it goes).
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=cuda)

    corpus = Corpus.open(args.corpus)
    read = {"seed": args.seed, "tokenizer": "gpt2", "val_fraction": args.val_fraction}
    packed = {"segments": args.segments, "packing": args.packing}
    train = PackedBatchDataset(
        corpus, args.seq_len, args.batch_size, split="train", epochs=None, **packed, **read
    )  # endless: epoch after epoch, each in its own order
    # A DataLoader worker reads in its own process: a read stuck there (a hung network mount) is
    # bounded by the DataLoader's timeout only (torch's default, 0, waits for ever).
    timeout = 600 if args.num_workers else 0  # (torch: no timeout without workers)
    loader = StatefulDataLoader(train, batch_size=None, num_workers=args.num_workers,
                                timeout=timeout)
    val_loader = Loader(corpus, split="val", workers=0, **read)
    with val_loader.batches(args.seq_len, args.batch_size, **packed) as val_batches:
        val = [as_tensors(b, device) for b in islice(val_batches, args.eval_batches)]
    if not val:
        raise SystemExit("the val split holds less than one batch: raise --val-fraction")

    model = GPT(args.seq_len, args.layers, args.heads, args.width).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]  # matrices; not norms and biases
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    run = {name: getattr(args, name) for name in RUN_ARGS}
    step = 0
    checkpoint = None
    if args.checkpoint.exists():
        checkpoint = torch.load(args.checkpoint, weights_only=False, map_location=device)
        if checkpoint["run"] != run:
            changed = sorted(k for k in run if checkpoint["run"].get(k) != run[k])
            raise SystemExit(f"{args.checkpoint} was saved with other {', '.join(changed)}")
        loader.load_state_dict(checkpoint["data"])
    # On a GPU: the device stage, started now: its first batches are made while the model loads.
    feed: Any = to_device(loader, device).start() if cuda else loader
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        torch.set_rng_state(checkpoint["rng"].cpu())
        step = checkpoint["step"]
        print(f"resumed at step {step}", flush=True)
    if args.log:
        cut_log(args.log, step)

    print(f"{sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    try:
        batches: Iterator[Any] = iter(feed)
        while step < args.steps:
            batch = next(batches, None)
            if batch is None:  # only with no train batch at all: the stream is endless
                raise SystemExit("the train split holds less than one batch")
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, args)
            loss = model(*inputs(batch))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            if args.log:
                with args.log.open("a") as f:
                    f.write(f"{step} {loss.item()!r}\n")
            line, show = f"step {step}: loss {loss.item():.4f}", step % 10 == 0
            if step % args.eval_every == 0 or step == args.steps:
                line, show = f"{line}, val loss {evaluate(model, val):.4f}", True
            if step % args.checkpoint_every == 0 or step == args.steps:
                state = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "data": feed.state_dict(),  # after the batch just trained on
                    "rng": torch.get_rng_state(),
                    "step": step,
                    "run": run,
                }
                save_atomically(state, args.checkpoint)
                line, show = f"{line} (checkpoint saved)", True
            if show:
                print(line, flush=True)
            if step == args.interrupt_at:
                print(f"interrupted after step {step}", flush=True)
                return
    finally:
        if cuda:  # the device stage's thread, and the DataLoader under it
            feed.close()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        # The checkpoint file is the last complete one: the same command continues from it.
        print("interrupted: run the same command again to continue", file=sys.stderr)
        raise SystemExit(130) from None
