"""Damage to the cache is never fatal: a broken entry is a miss and is overwritten; a cache that
cannot be opened or written means a run without it, with one notice that says why."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from flowkit.cache.store import MISS, Cache
from tests.support import python_flow, read_json, start_flowkit, write_jsonl


@pytest.fixture
def project(tmp_path: Path) -> Path:
    python_flow(tmp_path, "def f(x):\n    return x * 2\n")
    write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(4)])
    return tmp_path


def _run(work: Path, cache: Path) -> tuple[dict, str]:
    proc = start_flowkit(work, "run", "t.yaml", "--data", "d.jsonl", "--cache-dir", str(cache))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in out + err
    run_dir = Path(work / out.split("run folder: ")[1].split()[0])
    return read_json(run_dir / "run.json"), err


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda c: (c / "cache.sqlite").write_bytes(b"garbage" * 100), "file is not a database"),
        (lambda c: (c / "cache.sqlite").mkdir(), "is a directory"),
    ],
)
def test_a_cache_that_cannot_open_means_a_run_without_it(project: Path, damage, why: str) -> None:
    cache = project / "cache"
    cache.mkdir()
    damage(cache)
    info, err = _run(project, cache)
    assert info["status"] == "completed"
    assert info["counts"]["succeeded"] == 4
    notice = (
        f"the cache {cache / 'cache.sqlite'} cannot be opened: {why}; this run went on without it"
    )
    assert info["notices"] == [notice]
    assert err.count(notice) == 1


def test_a_damaged_entry_is_a_miss_and_is_overwritten(project: Path) -> None:
    cache = project / "cache"
    _run(project, cache)
    with sqlite3.connect(cache / "cache.sqlite") as db:
        db.execute("UPDATE results SET value = x'7b226f223a' WHERE id = 1")  # '{"o":' cut off
    info, _ = _run(project, cache)
    assert info["counts"]["cache_hits"] == 3 and info["counts"]["succeeded"] == 4
    info, _ = _run(project, cache)
    assert info["counts"]["cache_hits"] == 4


def test_a_full_disk_turns_the_cache_off_and_names_itself(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    assert cache._db is not None
    # SQLite's own cap on pages gives exactly what a full disk gives: SQLITE_FULL.
    pages = cache._db.execute("PRAGMA page_count").fetchone()[0]
    cache._db.execute(f"PRAGMA max_page_count={pages + 2}")
    for i in range(2000):
        cache.put(f"k{i}", "x" * 1000)
    cache.flush()
    assert cache.problem == (
        f"the cache {tmp_path / 'cache.sqlite'} cannot be written: the disk is full "
        "(database or disk is full); this run went on without it"
    )
    assert cache.get("k1") is MISS
    cache.put("k1", 1)
    cache.close()


def test_a_bad_page_turns_the_cache_off(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    for i in range(3000):
        cache.put(f"k{i}", "v" * 200)
    cache.close()
    path = tmp_path / "cache.sqlite"
    data = bytearray(path.read_bytes())
    data[4096 * 3 : 4096 * 40] = b"\xff" * (4096 * 37)
    path.write_bytes(bytes(data))
    cache = Cache(tmp_path)
    results = [cache.get(f"k{i}") for i in range(3000)]
    assert MISS in results
    assert cache.problem is not None and "malformed" in cache.problem
    cache.close()
