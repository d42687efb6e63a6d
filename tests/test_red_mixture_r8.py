"""What a red team (session 31) found in mixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from openwebtext import Loader, Mixture
from openwebtext.errors import CorpusError
from tables_support import sample_texts, write_jsonl


@pytest.mark.parametrize("tokenizer", ["bytes", None])
def test_a_part_whose_share_is_empty_is_said_as_no_document(
    tmp_path: Path, tokenizer: str | None
) -> None:
    """With a tokenizer, an epoch of no document was said as "documents of no id … by tokens
    it would be chosen for ever", of a mixture by documents."""
    write_jsonl(tmp_path / "a" / "a.jsonl", sample_texts(40))
    write_jsonl(tmp_path / "c" / "c.jsonl", sample_texts(3))  # (no document for rank 0 of 4)
    mixture = Mixture({"a": str(tmp_path / "a"), "c": str(tmp_path / "c")}, by="documents")
    loader = Loader(mixture, workers=0, seed=0, rank=0, world_size=4, even=None,
                    tokenizer=tokenizer)  # fmt: skip
    said = r"part 'c': .*epoch 0 yielded no document \(rank 0 of world_size 4\): a mixture reads"
    with pytest.raises(CorpusError, match=said) as info, loader.iter() as documents:
        for _ in range(20):
            next(documents)
    assert "no id" not in str(info.value)
