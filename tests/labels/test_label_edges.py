"""Labels at the edges: a torn line in RUN/labels.jsonl with labels after it, a single label,
a key that names several rows, a severity threshold, a labels file with a byte-order mark, and
a review POST whose body is not JSON."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

import flowkit
from flowkit.errors import DataError
from flowkit.labels.read import read_labels
from flowkit.labels.store import RUN_LABELS, append
from flowkit.labels.summary import agree, corrected_metrics
from flowkit.review.rows import open_review
from flowkit.review.server import make_app
from tests.support import python_flow, write, write_jsonl

SEVERITY_FLOW = """
name: harm
inputs: {v: {type: integer}, threshold: {type: string, default: medium}}
outputs: {score: ${j.output}}
nodes:
  - {name: j, type: python, source: j.py, function: j, inputs: {v: ${inputs.v}}}
"""


def _run(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    flow = python_flow(tmp_path, "def f(x):\n    return x\n")
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    return flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir


def test_a_torn_line_followed_by_later_labels_is_skipped(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": 1 + i % 5} for i in range(10)])
    path = run_dir / RUN_LABELS
    path.write_text('{"label_id": "a", "line": 1, "y": 2}\n{"label_id": "b", "li')  # a crash
    append(path, [{"label_id": "c", "line": 2, "y": 3}])  # the review goes on
    labels = read_labels(path, run_dir, "line")
    assert labels.outputs["y"].human == {1: {"": 2.0}, 2: {"": 3.0}}
    review = open_review(run_dir, "y", "random", 0, None, False, "")
    assert review.state()["labelled"] == {"1": 2.0, "2": 3.0}


def test_a_torn_line_in_a_people_file_is_still_an_error(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": 1 + i % 5} for i in range(10)])
    path = tmp_path / "people.jsonl"
    path.write_text('{"line": 1, "y": 2}\n{"line": 2, "y\n{"line": 3, "y": 3}\n')
    with pytest.raises(DataError, match=r"people\.jsonl:2"):
        read_labels(path, run_dir)


def test_one_label_gives_no_corrected_figure(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": 1 + i % 5} for i in range(10)])
    people = write_jsonl(tmp_path / "people.jsonl", [{"line": 3, "y": 5}])
    labels = read_labels(people, run_dir)
    assert corrected_metrics(labels) == {}  # not 5 [5, 5]: one label says nothing of spread
    figures = agree(labels)["outputs"]["y"]
    assert figures["n"] == 1 and "ci" not in figures and "corrected_mean" not in figures


def test_a_key_naming_several_rows_is_refused(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": 1 + i % 5, "id": f"q{i // 2}"} for i in range(10)])
    people = write_jsonl(tmp_path / "people.jsonl", [{"id": "q1", "y": 4}])
    with pytest.raises(DataError, match=r"id='q1' names several rows of the run \(lines 2, 3\)"):
        read_labels(people, run_dir)
    by_line = write_jsonl(tmp_path / "by_line.jsonl", [{"line": 2, "y": 4}, {"line": 3, "y": 1}])
    assert read_labels(by_line, run_dir, "line").outputs["y"].human == {2: {"": 4.0}, 3: {"": 1.0}}


def test_a_severity_passes_below_its_threshold(tmp_path: Path) -> None:
    flow = write(tmp_path / "harm.yaml", SEVERITY_FLOW)
    write(tmp_path / "j.py", "def j(v):\n    return v\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"v": i % 4} for i in range(8)])
    run_dir = flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir
    words = ["very low", "low", "medium", "high"]
    people = write_jsonl(
        tmp_path / "people.jsonl", [{"line": i, "score": words[i % 4]} for i in range(8)]
    )
    figures = corrected_metrics(read_labels(people, run_dir))
    assert figures["harm.pass_rate.labels_only"] == 0.5  # very low and low pass; medium, high not


def test_a_labels_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": 1 + i % 5} for i in range(10)])
    people = tmp_path / "people.jsonl"
    people.write_bytes(b'\xef\xbb\xbf{"line": 1, "y": 2}\n{"line": 2, "y": 3}\n')
    assert read_labels(people, run_dir).outputs["y"].human == {1: {"": 2.0}, 2: {"": 3.0}}


def test_a_post_that_is_not_a_json_object_is_a_400(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": 1 + i % 5} for i in range(10)])
    review = open_review(run_dir, "y", "random", 0, None, False, "me")

    async def go() -> None:
        async with TestClient(TestServer(make_app(review, "tok"))) as client:
            for route in ("/api/label", "/api/undo"):
                for body in ("not json", json.dumps([1, 2])):
                    reply = await client.post(route, params={"token": "tok"}, data=body)
                    assert reply.status == 400, (route, body)

    asyncio.run(go())


def test_a_severity_seen_only_at_its_two_lowest_levels_is_no_pass_fail(tmp_path: Path) -> None:
    flow = write(tmp_path / "harm.yaml", SEVERITY_FLOW)
    write(tmp_path / "j.py", "def j(v):\n    return v\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"v": 0} for _ in range(8)])  # all "very low"
    run_dir = flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir
    people = write_jsonl(
        tmp_path / "people.jsonl",
        [{"line": i, "score": ["very low", "low"][i % 2]} for i in range(4)],
    )
    labels = read_labels(people, run_dir)
    assert agree(labels)["outputs"]["score"]["scale"] == "ordinal"
    figures = corrected_metrics(labels)
    assert figures["harm.mean.labels_only"] == 0.5
    assert figures["harm.pass_rate.labels_only"] == 1.0  # "low" is below "medium": a pass


def test_review_offers_every_severity_level_not_pass_fail(tmp_path: Path) -> None:
    flow = write(tmp_path / "harm.yaml", SEVERITY_FLOW)
    write(tmp_path / "j.py", "def j(v):\n    return v\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"v": i % 2} for i in range(8)])  # 0 and 1 only
    run_dir = flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir
    review = open_review(run_dir, None, "random", 0, None, False, "me")
    # with y/n, "pass" would write 1 ("low") and "fail" 0 ("very low"): inverted
    assert not review.binary and review.levels == [0.0, 1.0, 2.0, 3.0]


def test_review_state_does_not_reread_the_run(tmp_path: Path) -> None:
    """Every keystroke asks for the state: re-reading a large run's outputs.jsonl (and data
    file) each time made a label take seconds to save on a 30,000-row run."""
    run_dir = _run(tmp_path, [{"x": 1 + i % 5, "id": f"q{i}"} for i in range(10)])
    review = open_review(run_dir, "y", "random", 0, 0.5, False, "me")
    append(run_dir / RUN_LABELS, [{"label_id": "a", "line": 1, "y": 2.0, "annotator": "me"}])
    (run_dir / "outputs.jsonl").rename(tmp_path / "moved.jsonl")
    (tmp_path / "d.jsonl").rename(tmp_path / "moved-data.jsonl")
    assert review.state()["labelled"] == {"1": 2.0}


def test_a_severity_word_output_without_a_threshold_passes_below_medium(tmp_path: Path) -> None:
    """A suite's row carries no harm flow's threshold: the harm flows' default (medium) holds,
    not a 1-5 score's (above 3), which failed every row."""
    flow = write(
        tmp_path / "suite.yaml",
        "name: suite\ninputs: {v: {type: integer}}\noutputs: {violence: ${j.output}}\n"
        "nodes:\n  - {name: j, type: python, source: j.py, function: j,"
        " inputs: {v: ${inputs.v}}}\n",
    )
    write(tmp_path / "j.py", "def j(v):\n    return ['very low', 'low'][v % 2]\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"v": i} for i in range(12)])
    run_dir = flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir
    words = ["low", "very low", "medium", "very low"]
    people = write_jsonl(
        tmp_path / "people.jsonl", [{"line": i, "violence": words[i]} for i in range(4)]
    )
    figures = corrected_metrics(read_labels(people, run_dir))
    assert figures["violence.pass_rate.labels_only"] == 0.75
    assert figures["violence.pass_rate.judge_ci"] == [1.0, 1.0]


def test_a_pass_rate_interval_stays_within_zero_and_one(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, [{"x": i % 2} for i in range(8)])  # a 0/1 verdict
    people = write_jsonl(
        tmp_path / "people.jsonl", [{"line": i, "y": ["pass", "fail", "pass"][i]} for i in range(3)]
    )
    figures = corrected_metrics(read_labels(people, run_dir))
    for name in ("corrected_ci", "labels_only_ci", "judge_ci"):
        lo, hi = figures[f"y.pass_rate.{name}"]
        assert 0.0 <= lo <= hi <= 1.0, (name, lo, hi)


def test_ids_from_the_data_file_are_found_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`id` is no input of the flow, so it is read from the run's data file, whose path the
    run kept as given (relative): `flowkit agree` from elsewhere must still find it."""
    work = tmp_path / "work"
    work.mkdir()
    flow = python_flow(work, "def f(x):\n    return x\n")
    write_jsonl(work / "d.jsonl", [{"x": 1 + i % 5, "id": f"q{i}"} for i in range(10)])
    monkeypatch.chdir(work)
    run_dir = flowkit.run(flow, "d.jsonl", runs_root=work / "runs", name="r").run_dir
    people = write_jsonl(tmp_path / "people.jsonl", [{"id": "q3", "y": 4}, {"id": "q5", "y": 1}])
    monkeypatch.chdir(tmp_path)
    labels = read_labels(people, run_dir)
    assert labels.outputs["y"].human == {3: {"": 4.0}, 5: {"": 1.0}}


def test_agree_on_a_file_with_no_labels_says_so(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from flowkit.cli.main import main

    run_dir = _run(tmp_path, [{"x": 1 + i % 5} for i in range(10)])
    empty = write(tmp_path / "empty.jsonl", "")
    result = CliRunner().invoke(main, ["agree", str(run_dir), "--labels", str(empty)])
    assert result.exit_code == 2 and "holds no labels" in result.output


def test_a_run_with_an_unreadable_judge_answer_can_still_be_reviewed(tmp_path: Path) -> None:
    """One invalid score (None) made the run "have no output to label"."""
    flow = python_flow(tmp_path, "def f(x):\n    return None if x == 0 else x\n")
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i % 6} for i in range(12)])
    run_dir = flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir
    review = open_review(run_dir, None, "random", 0, None, False, "me")
    assert review.output == "y" and review.levels == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert sorted(review.order) == list(range(12))
    assert review.order[-2:] == [0, 6]  # no judge value: their labels cannot correct anything


def test_a_resumed_run_keeps_its_corrected_figures_and_gates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--resume rewrites metrics.json: the run's own labels (RUN/labels.jsonl) correct it
    again, and a gate may name the corrected figures without --labels."""
    from click.testing import CliRunner

    from flowkit.cli.main import main

    flow = python_flow(tmp_path, "def f(x):\n    return x\n", "aggregate")
    write(
        tmp_path / "m.py",
        "def f(x):\n    return x\n\n\ndef aggregate(ys):\n    return {'mean': sum(ys) / len(ys)}\n",
    )
    write_jsonl(tmp_path / "d.jsonl", [{"x": 1 + i % 5} for i in range(10)])
    write_jsonl(tmp_path / "people.jsonl", [{"line": i, "y": 1 + i % 3} for i in range(4)])
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(
        main, ["run", str(flow), "--data", "d.jsonl", "--name", "r", "--labels", "people.jsonl"]
    )
    assert first.exit_code == 0, first.output
    before = json.loads((tmp_path / "runs/r/metrics.json").read_text())
    assert "y.mean.corrected" in before
    again = runner.invoke(main, ["run", "--resume", "r", "--gate", "y.mean.corrected>=1", "-q"])
    assert again.exit_code == 0, again.output
    after = json.loads((tmp_path / "runs/r/metrics.json").read_text())
    assert after["y.mean.corrected"] == before["y.mean.corrected"]
