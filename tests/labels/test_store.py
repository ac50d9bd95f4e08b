"""RUN/labels.jsonl: appends survive a torn last line, and keeping a file's labels twice adds
nothing the second time."""

from __future__ import annotations

from pathlib import Path

import flowkit
from flowkit.labels.read import read_labels
from flowkit.labels.store import RUN_LABELS, append, keep_with_run, written_ids
from tests.support import python_flow, read_jsonl, write_jsonl


def _run(tmp_path: Path) -> Path:
    flow = python_flow(tmp_path, "def f(x):\n    return x\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": 1 + i % 5} for i in range(10)])
    return flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir


def test_an_append_after_a_torn_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"label_id": "a", "line": 1, "y": 2}\n{"label_id": "b", "li')  # a crash
    append(path, [{"label_id": "c", "line": 2, "y": 3}])
    assert written_ids(path) == {"a", "c"}
    assert path.read_text().splitlines()[-1] == '{"label_id": "c", "line": 2, "y": 3}'


def test_keeping_the_same_labels_twice_adds_nothing(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    source = write_jsonl(tmp_path / "people.jsonl", [{"line": i, "y": 3} for i in range(4)])
    labels = read_labels(source, run_dir)
    assert keep_with_run(run_dir, labels, source) == 4
    assert keep_with_run(run_dir, labels, source) == 0  # a resume with the same --labels
    kept = read_jsonl(run_dir / RUN_LABELS)
    assert [(r["line"], r["y"]) for r in kept] == [(i, 3) for i in range(4)]
    again = read_labels(run_dir / RUN_LABELS, run_dir, "line")
    assert again.outputs["y"].human == labels.outputs["y"].human
