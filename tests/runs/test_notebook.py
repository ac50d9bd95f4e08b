"""Using flowkit from a notebook: inside a running event loop, with DataFrames and lists of
dicts as data, results as a DataFrame, and short displays."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

import flowkit
from flowkit.errors import UsageError
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, REPO, read_json, read_jsonl, write

F1 = REPO / "flows" / "f1_score.yaml"
ROWS = [
    {"answer": "Paris is the capital", "ground_truth": "Paris"},
    {"answer": "nothing alike", "ground_truth": "William Shakespeare"},
]


def test_run_inside_a_running_event_loop_as_in_jupyter(tmp_path: Path) -> None:
    async def cell() -> flowkit.api.RunResult:
        # What a notebook cell does: a plain call, while the kernel's loop is running.
        return flowkit.run(F1, EXAMPLES / "qa.jsonl", output=tmp_path / "sync")

    result = asyncio.run(cell())
    assert result.status == "completed" and result.counts["succeeded"] == 6
    assert read_json(tmp_path / "sync" / "run.json")["status"] == "completed"


def test_arun_awaits_a_run_without_blocking_the_loop(tmp_path: Path) -> None:
    async def cell() -> tuple[flowkit.api.RunResult, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        result = await flowkit.arun(F1, EXAMPLES / "qa.jsonl", output=tmp_path / "async")
        task.cancel()
        return result, ticks

    result, ticks = asyncio.run(cell())
    assert result.counts["succeeded"] == 6 and ticks > 0


def test_a_dataframe_is_data_and_to_pandas_gives_one_row_per_data_row(tmp_path: Path) -> None:
    frame = pd.DataFrame(ROWS)
    result = flowkit.run(F1, frame, output=tmp_path / "df")
    assert result.counts["succeeded"] == 2
    # The rows are kept in the run folder, so the run can be resumed and shown like any other.
    assert read_jsonl(tmp_path / "df" / "data.jsonl") == ROWS
    out = result.to_pandas()
    assert list(out.index) == [0, 1]
    assert list(out["status"]) == ["ok", "ok"]
    assert list(out["inputs.answer"]) == [r["answer"] for r in ROWS]
    assert out.loc[0, "outputs.score"] == pytest.approx(0.5)  # P 1/3 (paris is capital), R 1
    assert out["error"].isna().all()


def test_a_list_of_dicts_is_data(tmp_path: Path) -> None:
    result = flowkit.run(F1, ROWS, output=tmp_path / "list")
    assert [r["inputs"]["ground_truth"] for r in result.rows()] == ["Paris", "William Shakespeare"]


def test_to_pandas_has_the_error_of_a_failed_row(tmp_path: Path) -> None:
    write(
        tmp_path / "check.py",
        """
        def check(x):
            if x < 0:
                raise ValueError("negative")
            return {"score": x, "nested": {"a": x}}
    """,
    )
    flow = write(
        tmp_path / "f.yaml",
        """
        name: f
        inputs: {x: {type: number}}
        outputs: {out: ${check.output}}
        nodes:
          - {name: check, type: python, source: check.py, function: check, inputs: {x: ${inputs.x}}}
    """,
    )
    out = flowkit.run(flow, [{"x": 1}, {"x": -1}], output=tmp_path / "bad").to_pandas()
    assert list(out["status"]) == ["ok", "failed"]
    assert list(out["outputs.out.nested.a"].fillna(-9)) == [1, -9]
    assert pd.isna(out.loc[0, "error"])
    assert out.loc[1, "error"] == "check: ValueError: negative"


def test_to_pandas_has_the_error_of_a_bad_input_row(tmp_path: Path) -> None:
    """A DataFrame with a missing value (None, NaN) is a bad input row, whose error names no
    node: to_pandas() raised KeyError 'node' on it."""
    frame = pd.DataFrame(
        [
            {"answer": "Paris", "ground_truth": "Paris"},
            {"answer": None, "ground_truth": "Rome"},
            {"answer": float("nan"), "ground_truth": "Rome"},
        ]
    )
    out = flowkit.run(F1, frame, output=tmp_path / "nan").to_pandas()
    assert list(out["status"]) == ["ok", "bad_input", "bad_input"]
    assert out.loc[1, "error"].startswith("DataError: ")
    assert "input 'answer'" in out.loc[1, "error"]
    assert "input 'answer'" in out.loc[2, "error"]


def test_other_data_is_refused_and_leaves_no_folder(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        flowkit.run(F1, 42, output=tmp_path / "none")
    assert str(err.value).startswith(
        "data must be a path, a pandas DataFrame or a list of dicts, not int"
    )
    with pytest.raises(UsageError) as err:
        flowkit.run(F1, [{"answer": "a"}, "b"], output=tmp_path / "none")
    assert str(err.value).startswith("data row 1 is a str, not a dict")
    assert not (tmp_path / "none").exists()


def test_a_refused_dataframe_run_leaves_no_folder(tmp_path: Path) -> None:
    with pytest.raises(flowkit.ValidationError):
        flowkit.run(F1, pd.DataFrame([{"question": "q"}]), output=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_flow_and_result_display_briefly(llm_server: LocalServer, tmp_path: Path) -> None:
    flow = flowkit.load_flow(REPO / "flows" / "groundedness.yaml")
    text = repr(flow)
    assert len(text) < 300 and "groundedness" in text and "judge" in text
    assert "Rules:" not in text  # no prompt text
    assert "<table>" in flow._repr_html_()
    result = flowkit.run(flow, EXAMPLES / "qa.jsonl", output=tmp_path / "g")
    text = repr(result)
    assert len(text) < 400 and "6 rows: 6 ok" in text and "groundedness.mean=" in text
    page = result._repr_html_()
    for name in result.metrics:
        assert f"<td>{name}</td>" in page
