"""The garbage collector while rows run: what existed is frozen, the thresholds are the
process's (cyclic garbage is freed as often as without flowkit), and all is as it was once the
last run ends."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path

import flowkit
from flowkit.engine.collector import fewer_collections
from tests.support import python_flow, write_jsonl


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_rows_run_with_what_existed_frozen_and_the_thresholds_untouched() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with fewer_collections():
        assert gc.get_threshold() == before
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
            seen.append(gc.get_freeze_count())  # the first run has ended; this one still runs

    thread = threading.Thread(target=other_run)
    with fewer_collections():
        thread.start()
        inner_started.wait(5)
    outer_done.set()
    thread.join(5)
    assert seen and seen[0] > 0
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
        # Still frozen, and nothing added (a thread left by another test may free a frozen
        # object meanwhile, so the count may fall, never to 0 and never above).
        assert 0 < gc.get_freeze_count() <= frozen
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
    assert next(result.rows())["outputs"]["y"] == [True, gc.get_threshold()[0]]


CYCLES = """
import weakref

class Cycle:
    def __init__(self):
        self.me = self
        self.buffer = bytearray(64 * 1024)

alive = weakref.WeakSet()

def f(x):
    cycle = Cycle()
    alive.add(cycle)
    return len(alive)
"""


def test_cyclic_garbage_is_freed_while_rows_run(tmp_path: Path) -> None:
    # Each row leaves one cycle holding a buffer: the collector must keep up as it does without
    # flowkit (a cycle adds to the count that triggers a collection, so no more than the
    # youngest generation's threshold can be waiting at once).
    flow = python_flow(tmp_path, CYCLES)
    threshold = gc.get_threshold()[0]
    rows = 3 * threshold
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(rows)])
    result = flowkit.run(flow, data, runs_root=tmp_path / "runs", use_cache=False)
    waiting = [r["outputs"]["y"] for r in result.rows()]
    assert len(waiting) == rows
    assert max(waiting) <= threshold
