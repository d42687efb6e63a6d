"""A minimal training loop that checkpoints its data stream with its model, and resumes exactly.

The model is a byte-level bigram language model (a 256 x 256 table of logits),
small enough to train on a CPU in seconds; the point is the checkpoint: model,
optimizer and ``StatefulDataLoader`` state are saved together, so a resumed run
sees exactly the documents the interrupted one had not seen yet.

    python examples/train_tiny.py CORPUS --steps 200 --checkpoint ckpt.pt
    python examples/train_tiny.py CORPUS --steps 400 --checkpoint ckpt.pt   # resumes at 200

With no CORPUS, the built-in generated corpus is used.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from openwebtext.torch import OpenWebTextDataset

CONTEXT = 256  # bytes per training sequence


def to_batch(docs: list[object]) -> torch.Tensor:
    """Byte sequences of the first CONTEXT bytes of each document, padded with 0."""
    out = torch.zeros(len(docs), CONTEXT, dtype=torch.long)
    for row, doc in enumerate(docs):
        data = doc.text.encode()[:CONTEXT]  # type: ignore[attr-defined]
        out[row, : len(data)] = torch.tensor(list(data), dtype=torch.long)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?")
    parser.add_argument("--steps", type=int, default=200, help="train until this step")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--checkpoint", type=Path, default=Path("tiny-ckpt.pt"))
    parser.add_argument("--every", type=int, default=50, help="checkpoint every N steps")
    parser.add_argument("--log", type=Path, help="append the names of the documents trained on")
    args = parser.parse_args()
    if args.corpus is None:
        from openwebtext.synth import default_corpus

        args.corpus = str(default_corpus())

    torch.manual_seed(0)
    model = torch.nn.Embedding(256, 256)  # logits of the next byte given this byte
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    dataset = OpenWebTextDataset(args.corpus, seed=0, epochs=None)  # endless, epoch after epoch
    loader = StatefulDataLoader(
        dataset, batch_size=args.batch_size, num_workers=2, collate_fn=lambda docs: docs
    )
    step = 0
    if args.checkpoint.exists():
        checkpoint = torch.load(args.checkpoint, weights_only=False)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        loader.load_state_dict(checkpoint["data"])
        step = checkpoint["step"]
        print(f"resumed at step {step}")

    for docs in loader:
        if step >= args.steps:
            break
        batch = to_batch(docs)
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if args.log:
            with args.log.open("a") as f:
                f.writelines(f"{step} {doc.name}\n" for doc in docs)
        if step % args.every == 0 or step == args.steps:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "data": loader.state_dict(),
                "step": step,
            }
            torch.save(state, args.checkpoint)
            print(f"step {step}: loss {loss.item():.3f} (checkpoint saved)")


if __name__ == "__main__":
    main()
