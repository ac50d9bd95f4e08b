"""The garbage collector while rows run: quieter, and as it was once the last run ends."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import flowkit
from flowkit.engine import collector
from flowkit.engine.collector import fewer_collections
from tests.support import python_flow, write_jsonl


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_rows_run_with_what_existed_frozen_and_young_collections_rarer() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with fewer_collections():
        assert gc.get_threshold()[0] == max(collector.YOUNG, before[0])
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_overlapping_runs_restore_the_settings_when_the_last_one_ends() -> None:
    before = gc.get_threshold()
    inner_started, outer_done = threading.Event(), threading.Event()
    seen: list[tuple[int, ...]] = []

    def other_run() -> None:
        with fewer_collections():
            inner_started.set()
            outer_done.wait(5)
            seen.append(gc.get_threshold())  # the first run has ended; this one still runs

    thread = threading.Thread(target=other_run)
    with fewer_collections():
        thread.start()
        inner_started.wait(5)
    outer_done.set()
    thread.join(5)
    assert seen and seen[0][0] == max(collector.YOUNG, before[0])
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_garbage_from_before_a_run_is_collectable_after_it(tmp_path: Path) -> None:
    cycle = _Node()
    gone = weakref.ref(cycle)
    del cycle
    flow = python_flow(tmp_path, "def f(x):\n    return x + 1\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(3)])
    result = flowkit.run(flow, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert [r["outputs"]["y"] for r in result.rows()] == [1, 2, 3]
    assert gc.get_freeze_count() == 0  # unfrozen: nothing is kept for good
    gc.collect()
    assert gone() is None


def test_what_the_process_set_up_itself_is_left_alone() -> None:
    before = gc.get_threshold()
    gc.freeze()  # as a server does before it forks
    frozen = gc.get_freeze_count()
    try:
        with fewer_collections():
            pass
        assert gc.get_freeze_count() == frozen  # still frozen, and nothing added
    finally:
        gc.unfreeze()
    gc.set_threshold(0)  # the collector turned off
    try:
        with fewer_collections():
            assert gc.get_threshold()[0] == 0
            assert gc.get_freeze_count() == 0
    finally:
        gc.set_threshold(*before)


def test_rows_run_inside_it(tmp_path: Path) -> None:
    flow = python_flow(
        tmp_path,
        "import gc\ndef f(x):\n    return [gc.get_freeze_count() > 0, gc.get_threshold()[0]]\n",
    )
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": 1}])
    result = flowkit.run(flow, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert next(result.rows())["outputs"]["y"] == [
        True,
        max(collector.YOUNG, gc.get_threshold()[0]),
    ]
