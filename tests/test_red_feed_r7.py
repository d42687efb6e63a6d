"""What a red team (session 30) found in the feed's clients: an HF dataset's error raised in
a DataLoader worker reached the loop as torch's text, without the library's message, ``path``
or ``member``; the mask functions given one row (L,) failed from inside (an ``IndexError``, a
bare unpacking error); ``reshard_loader_states`` named rank x worker shares as ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext.errors import CorruptMember, StateError
from support import flip_bit, member_offset, outer_tar, sample_docs, xz_member

torch = pytest.importorskip("torch")


def _corpus(folder: Path) -> Path:
    folder.mkdir()
    outer_tar(folder / "urlsf_subset00.tar",
              [(f"m{k}.xz", xz_member(sample_docs(f"a{k}", 10))) for k in range(4)])  # fmt: skip
    return folder


def test_an_hf_dataset_s_error_in_a_dataloader_worker_keeps_its_message(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    from torch.utils.data import DataLoader

    from openwebtext.hf import iterable_dataset

    folder = _corpus(tmp_path / "c")
    dataset = iterable_dataset(folder, num_shards=2, seed=0)  # (its counts taken: then damaged)
    offset, size = member_offset(folder / "urlsf_subset00.tar", "m2.xz")
    flip_bit(folder / "urlsf_subset00.tar", offset + size // 2)
    with pytest.raises(CorruptMember) as caught:
        for _ in DataLoader(dataset, batch_size=None, num_workers=2):
            pass
    error = caught.value
    assert error.member is not None and error.path == str(folder / "urlsf_subset00.tar")
    assert str(error).startswith(f"{folder / 'urlsf_subset00.tar'}[{error.member}]: ")
    assert "Caught CorruptMember in DataLoader worker" not in str(error)


def test_masks_of_one_row_say_the_shape_they_take() -> None:
    from openwebtext.torch import document_cu_seqlens, document_mask, varlen

    one = torch.tensor([1, 1, 2, 0])
    for function in (document_mask, document_cu_seqlens, varlen):
        with pytest.raises(ValueError, match=r"takes segment ids as rows \(B, L\), not of shape "
                           r"\(4,\) \(one row: segment_ids\[None\]\)"):  # fmt: skip
            function(one)
    with pytest.raises(ValueError, match=r"of an integer dtype, not torch\.float32"):
        document_mask(one[None].float())
    assert document_mask(one[None]).shape == (1, 1, 4, 4)


def test_the_block_mask_of_one_row_says_the_shape_it_takes() -> None:
    from openwebtext.torch import document_block_mask

    pytest.importorskip("torch.nn.attention.flex_attention")
    with pytest.raises(ValueError, match=r"document_block_mask takes segment ids as rows"):
        document_block_mask(torch.tensor([1, 1, 2, 0]))


def test_a_missing_loader_state_is_said_in_shares(tmp_path: Path) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from openwebtext.torch import OpenWebTextDataset, reshard_loader_states

    dataset = OpenWebTextDataset(_corpus(tmp_path / "c"), seed=0, workers=0, rank=0, world_size=2,
                                 even=None)  # fmt: skip
    loader = stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=0)
    next(iter(loader))
    with pytest.raises(StateError, match=r"ranks missing: \[1\] of world_size 2 .*\(here a rank "
                       r"is a share: old rank \* its DataLoader workers \+ worker"):  # fmt: skip
        reshard_loader_states([loader.state_dict()], 1, 0)
