"""Red team, session 29: a member that failed when the documents were counted (under
``skip``: ``owt index --on-error skip``, or a skipping dataset that counted first) is counted
as 0 documents, and shares cut from those counts never read it: under ``raise`` no error, its
documents silently gone. The counts now say which members failed (``Counts.failed``): a
sharded run under ``raise`` stops at once with a ``CorruptMember`` naming it. (Under ``skip``
it is read where it lies inside a share, not at a share's edge: docs/sharding.md.)"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from openwebtext import Corpus, CorruptMember, Loader
from openwebtext.stream import count_documents
from support import corrupt_member, outer_tar, sample_docs, xz_member

MEMBERS = 7


def _corpus(tmp_path: Path, bad: int) -> Path:
    """One file of 7 members of 4 documents, member ``bad`` corrupt, counted under skip."""
    folder = tmp_path / f"bad{bad}"
    folder.mkdir()
    members = []
    for k in range(MEMBERS):
        docs = sample_docs(f"m{k}", 4)
        data = corrupt_member(docs) if k == bad else xz_member(docs)
        members.append((f"openwebtext/urlsf_subset00-{k}_data.xz", data))
    outer_tar(folder / "urlsf_subset00.tar", members)
    corpus = Corpus.open(folder)
    counts = count_documents(corpus, workers=0, on_error="skip")
    assert counts.documents[bad] == 0
    corpus.save_counts(counts)
    return folder


@pytest.mark.parametrize("bad", [0, 3, MEMBERS - 1])
@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("even", [None, "drop", "pad"])
def test_a_member_counted_as_failed_is_an_error_under_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: int, world: int, even: str | None
) -> None:
    corpus = _corpus(tmp_path, bad)
    member = f"openwebtext/urlsf_subset00-{bad}_data.xz"
    opts = {"workers": 0, "shuffle": False, "world_size": world, "even": even}
    for rank in range(world):
        with pytest.raises(CorruptMember, match="could not be read when the corpus's") as info:
            for _ in Loader(corpus, rank=rank, **opts):
                pass
        assert info.value.member == member
    caplog.set_level(logging.ERROR, "openwebtext")
    names = []
    for rank in range(world):
        with Loader(corpus, rank=rank, on_error="skip", **opts).iter() as docs:
            names += [d.name for d in docs]
    kept = (MEMBERS - 1) * 4
    assert len(set(names)) == kept - {None: 0, "drop": kept % world, "pad": 0}[even]
