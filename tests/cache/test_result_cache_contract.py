"""The ResultCache contract: what the engine, the job and the scale-out workers rely on of a node
result cache, checked over every implementation and every way a run sets one up."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowkit.cache.objects import ObjectCache
from flowkit.cache.result_cache import MISS, ResultCache
from flowkit.cache.store import Cache

Factory = Callable[[str], ResultCache]

IMPLEMENTATIONS: dict[str, Factory] = {
    # A local run's cache: flushed between rows when a second has passed, and at the end.
    "sqlite": lambda folder: Cache(Path(folder)),
    # A scale-out worker's: nothing written until the driver takes the entries over.
    "sqlite-worker": lambda folder: Cache(Path(folder), flush_every=2**62, flush_seconds=math.inf),
    # Every put written at once: reads come from the file, never from pending writes.
    "sqlite-write-through": lambda folder: Cache(Path(folder), flush_every=1),
    # The object store shared across machines (moto's S3 server, tests/cache/conftest.py): the
    # location is a prefix of the test's own bucket.
    "s3": ObjectCache,
}

VALUES: list[tuple[Any, dict[str, Any] | None]] = [
    ("a reply", {"model": "m", "messages": [{"role": "user", "content": "q"}], "usage": {}}),
    ({"score": 4, "reasons": ["x", "y"], "nested": {"deep": [1.5, None, True]}}, None),
    ([1e-11, -0.0, 2**53 + 1, "ü ✓"], None),
    (None, None),
    (0, {"model": "m", "messages": []}),
]


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], ResultCache]]:
    """A new cache over the test's store each call (a later run, or another process)."""
    factory = IMPLEMENTATIONS[request.param]
    made: list[ResultCache] = []
    s3 = request.param == "s3"
    location = request.getfixturevalue("s3_url") if s3 else str(tmp_path / "cache")

    def new() -> ResultCache:
        made.append(factory(location))
        return made[-1]

    yield new
    for cache in made:
        cache.close()


def test_an_unknown_key_is_a_miss(make: Callable[[], ResultCache]) -> None:
    cache = make()
    assert cache.get("never-put") is MISS
    assert cache.problem is None


@pytest.mark.parametrize(("output", "meta"), VALUES)
def test_a_put_is_got_back_equal_before_and_after_a_flush(
    make: Callable[[], ResultCache], output: Any, meta: dict[str, Any] | None
) -> None:
    cache = make()
    cache.put("k", output, meta)
    assert cache.get("k") == (output, meta)
    cache.flush()
    assert cache.get("k") == (output, meta)
    cache.close()
    assert make().get("k") == (output, meta)  # what a later run finds


def test_a_later_put_replaces_an_earlier_one(make: Callable[[], ResultCache]) -> None:
    cache = make()
    cache.put("k", "old")
    cache.flush()
    cache.prefetch({"k"})  # read ahead before the replacement (a --refresh run)
    cache.put("k", "new", {"model": "m", "messages": []})
    assert cache.get("k") == ("new", {"model": "m", "messages": []})
    cache.flush()
    assert cache.get("k") == ("new", {"model": "m", "messages": []})


def test_values_are_json_not_pickles(make: Callable[[], ResultCache]) -> None:
    cache = make()
    cache.put("tuple", (1, 2))
    cache.put("int-keys", {1: "a"})
    cache.put("nan", [math.nan, math.inf])
    assert cache.get("tuple") == ([1, 2], None)  # as a rerun replays it, and every run read it
    assert cache.get("int-keys") == ({"1": "a"}, None)
    assert cache.get("nan") == (["NaN", "Infinity"], None)

    class Opaque:
        pass

    with pytest.raises(TypeError, match="is not JSON"):
        cache.put("opaque", Opaque())
    assert cache.get("opaque") is MISS


def test_prefetch_never_changes_what_get_answers(make: Callable[[], ResultCache]) -> None:
    first = make()
    for i in range(0, 40, 2):
        first.put(f"k{i}", {"i": i})
    first.close()
    keys = {f"k{i}" for i in range(40)}
    plain, ahead = make(), make()
    ahead.prefetch(keys)
    assert {k: ahead.get(k) for k in sorted(keys)} == {k: plain.get(k) for k in sorted(keys)}
    # A key read ahead as missing is found once put (a later row with the same inputs).
    ahead.put("k1", "now")
    assert ahead.get("k1") == ("now", None)
    ahead.flush()
    assert ahead.get("k1") == ("now", None)


def test_flush_and_close_may_be_called_again(make: Callable[[], ResultCache]) -> None:
    cache = make()
    cache.flush()  # nothing pending
    cache.put("k", 1)
    cache.maybe_flush()
    cache.flush()
    cache.flush()
    cache.close()
    cache.close()
    assert cache.problem is None
    assert make().get("k") == (1, None)
