"""``source.settings``: a ``Storage`` holds what travels with it; what a process makes for it
lives in its backends' ``PerStorage`` tables."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from openwebtext.source import Storage, configure, resolve
from openwebtext.source.settings import FileInfo, PerStorage


@pytest.fixture
def default_storage() -> Iterator[Storage]:
    configure(None)
    yield resolve(None)
    configure(None)


def test_a_backends_table_is_its_own_for_each_storage() -> None:
    table: PerStorage[str, int] = PerStorage()
    one, two = Storage(), Storage({"anon": True})
    table.of(one)["x"] = 1
    assert table.of(one) == {"x": 1} and table.of(two) == {}


def test_a_pickled_storage_keeps_what_indexing_learnt_and_none_of_the_tables() -> None:
    table: PerStorage[str, int] = PerStorage()
    storage = Storage({"anon": True})
    shown = storage.alias("https://host/a.tar?X-Signature=secret")
    storage.remember(shown, FileInfo(10, "etag:1"))
    table.of(storage)["made"] = 1
    copy = pickle.loads(pickle.dumps(storage))
    assert shown == "https://host/a.tar"
    assert copy.real_url(shown) == "https://host/a.tar?X-Signature=secret"
    assert copy.identity(shown) == FileInfo(10, "etag:1") and copy.identity("other") is None
    assert table.of(copy) == {} and table.of(storage) == {"made": 1}


def test_configure_empties_the_default_storages_tables_only(default_storage: Storage) -> None:
    table: PerStorage[str, int] = PerStorage()
    other = Storage()
    table.of(None)["made"] = 1
    table.of(other)["made"] = 2
    default_storage.remember("u", FileInfo(1, "etag:1"))
    configure({"anon": True})
    assert resolve(None) is default_storage and default_storage.options == {"anon": True}
    assert table.of(None) == {} and table.of(other) == {"made": 2}
    assert default_storage.identity("u") == FileInfo(1, "etag:1")  # what indexing learnt stays


@pytest.mark.parametrize(
    ("kwargs", "error", "said"),
    [({"cache_dir": "c", "cache_size": "1G"}, ValueError, "cache_size must be None or an int"),
     ({"cache_dir": "c", "cache_size": -1}, ValueError, "not -1"),
     ({"cache_dir": "c", "cache_size": 1.5}, ValueError, "not 1.5"),
     ({"cache_dir": "c", "cache_size": True}, ValueError, "not True"),
     ({"cache_dir": 5}, TypeError, "cache_dir must be a folder's path, not int"),
     ({"options": "anon"}, TypeError, "storage_options must be a mapping"),
     ({"options": [1]}, TypeError, "storage_options must be a mapping")],
)  # fmt: skip
def test_a_storage_refuses_what_it_would_misread(
    kwargs: dict[str, object], error: type[Exception], said: str
) -> None:
    """Red team, session 28: a cache_size of "1G" failed every read deep in the engine, -1,
    1.5 and True were taken (nothing cached); a cache_dir of 5 and storage options that are
    no mapping failed inside ``os`` and ``dict()``."""
    with pytest.raises(error, match=said):
        Storage(**kwargs)  # type: ignore[arg-type]
    import numpy as np

    assert Storage(cache_dir="c", cache_size=np.int64(5)).cache.cap == 5  # type: ignore[union-attr]
