"""While batches run, the progress line says how many, how many calls they answered and an
estimate of the time left, from the provider's request counts."""

from __future__ import annotations

import re
from pathlib import Path

import flowkit
from flowkit.batch.progress import Progress
from flowkit.engine.context import Stats
from flowkit.testing.server import LocalServer
from tests.batch.conftest import questions


def test_the_time_left_is_the_slowest_batch_at_its_pace_so_far() -> None:
    progress = Progress(batches=2, running=2, calls=300, answered=50)
    progress.running_counts = {"a": (25, 100, 30.0), "b": (50, 200, 10.0)}
    assert progress.seconds_left() == 90.0  # a: a quarter done in 30 s
    assert progress.describe() == (
        "batches 2 (2 running) · calls 300: 50 answered, 0 failed · ~2 min left"
    )
    progress.running_counts = {"a": (0, 100, 30.0)}
    assert progress.seconds_left() is None  # no pace yet: no guess


def test_the_progress_line_shows_the_running_batch(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    seen: list[str] = []

    def note(stats: Stats) -> None:
        if stats.waiting and stats.waiting not in seen:
            seen.append(stats.waiting)

    llm_server.configure(batch_delay=0.5)
    try:
        flowkit.run(
            chained, questions(tmp_path, 4), runs_root=tmp_path / "r", batch=True, on_progress=note
        )
    finally:
        llm_server.configure(batch_delay=0.0)
    assert seen[0].startswith("batches 1 (1 running) · calls 4: 0 answered, 0 failed")
    assert any(re.search(r"batches 1 \(1 running\) .* · ~\d+s left$", line) for line in seen)
    assert seen[-1].startswith("batches 2 (0 running) · calls 8: 8 answered, 0 failed")


def test_the_progress_line_without_a_terminal_shows_the_batches_too() -> None:
    # A nightly suite runs in CI, where the progress is a plain line every few seconds.
    from flowkit.inspect.show import _progress_line

    stats = Stats()
    stats.waiting = Progress(batches=1, running=1, calls=4).describe()
    line = _progress_line(stats, 4, 0.0)
    assert line.endswith(" · batches 1 (1 running) · calls 4: 0 answered, 0 failed")
