"""The data mapping: flow inputs filled from data columns, literals or an earlier run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.data.mapping import Mapping, RowError
from flowkit.errors import UsageError, ValidationError, display
from flowkit.flow.loader import load_flow
from tests.support import FIXTURES, REPO, write, write_jsonl

FLOW = FIXTURES / "needs_question.yaml"


def test_each_input_defaults_to_the_column_of_its_name() -> None:
    maps = Mapping(load_flow(FLOW))
    assert maps.as_dict() == {
        "question": "${data.question}",
        "answer": "${data.answer}",
        "threshold": "${data.threshold}",
    }
    assert maps.apply({"question": "Q", "answer": "A", "extra": 1}, 0) == {
        "question": "Q",
        "answer": "A",
        "threshold": 0.5,
    }
    assert maps.apply({"question": "Q", "answer": "A", "threshold": "0.9"}, 0)["threshold"] == 0.9


def test_overrides_read_nested_columns_and_literals() -> None:
    maps = Mapping(
        load_flow(FLOW),
        {"answer": "${data.reply.text}", "threshold": "0.75", "question": "${data.turns[0]}"},
    )
    assert maps.as_dict() == {
        "question": "${data.turns[0]}",
        "answer": "${data.reply.text}",
        "threshold": "'0.75'",
    }
    row = {"reply": {"text": "A"}, "turns": ["first", "second"]}
    assert maps.apply(row, 0) == {"question": "first", "answer": "A", "threshold": 0.75}


def test_a_row_that_cannot_fill_an_input_raises_row_error() -> None:
    maps = Mapping(load_flow(FLOW))
    with pytest.raises(RowError) as info:
        maps.apply({"answer": "A"}, 0)
    assert str(info.value) == (
        "input 'question': ${data.question}: the row has no column 'question'"
    )
    with pytest.raises(RowError) as info:
        maps.apply({"question": "Q", "answer": "A", "threshold": "high"}, 0)
    assert str(info.value).startswith("input 'threshold' (${data.threshold}): expected number")


def test_unknown_and_malformed_overrides_are_usage_errors() -> None:
    flow = load_flow(FLOW)
    with pytest.raises(UsageError) as info:
        Mapping(flow, {"anwser": "${data.a}"})
    assert str(info.value) == (
        "--map names 'anwser', not an input of flow 'needs_question' "
        "(did you mean 'answer'?)\n"
        "  hint: the flow's inputs are: answer, question, threshold"
    )
    with pytest.raises(UsageError) as info:
        Mapping(flow, {"answer": "${answer}"})
    assert str(info.value) == (
        "--map answer=…: cannot read mapping '${answer}': use "
        "${data.COLUMN}, ${run.outputs.NAME}, ${run.inputs.NAME} or ${run.usage.NAME}"
    )
    with pytest.raises(UsageError) as info:
        Mapping(flow, {"answer": "${run.outputs.answer}"})
    assert str(info.value) == (
        "the mapping reads ${run.…} but no earlier run was given\n  hint: pass --run RUN_DIR"
    )


def test_a_required_input_with_no_column_stops_the_run_before_any_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    data = write_jsonl(tmp_path / "d.jsonl", [{"answer": "A", "questoin": "Q"}])
    with pytest.raises(ValidationError) as info:
        flowkit.run(FLOW, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert [str(d) for d in info.value.diagnostics] == [
        "tests/fixtures/flows/needs_question.yaml:3: input 'question' is required but maps to "
        "no data column (${data.question}); the data has: answer, questoin (did you mean "
        "'questoin'?); map one with --map question=${data.COLUMN}"
    ]
    assert not (tmp_path / "runs").exists()
    # Mapping the column by hand fixes it.
    result = flowkit.run(
        FLOW,
        data,
        mapping={"question": "${data.questoin}"},
        runs_root=tmp_path / "runs",
        cache_dir=tmp_path / "cache",
    )
    assert next(result.rows())["outputs"] == {"asked": "Q", "answer": "A"}


def test_an_optional_input_mapped_to_a_missing_column_is_reported(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"answer": "A", "question": "Q"}])
    with pytest.raises(ValidationError) as info:
        flowkit.run(
            FLOW,
            data,
            mapping={"threshold": "${data.thresh}"},
            runs_root=tmp_path / "runs",
            cache_dir=tmp_path / "cache",
        )
    (problem,) = info.value.diagnostics
    assert problem.line == 5
    assert "input 'threshold'" in problem.message and "(${data.thresh})" in problem.message


def test_bad_rows_are_recorded_and_the_good_rows_run(tmp_path: Path) -> None:
    data = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"question": "Q0", "answer": "A0"},
            {"answer": "A1"},
            {"question": "Q2", "answer": "A2", "threshold": "high"},
            {"question": "Q3", "answer": "A3"},
        ],
    )
    result = flowkit.run(FLOW, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache")
    rows = list(result.rows())
    assert [r["status"] for r in rows] == ["ok", "bad_input", "bad_input", "ok"]
    assert rows[1]["error"] == {
        "type": "DataError",
        "message": f"{display(data)}:2: input 'question': ${{data.question}}: the row has no "
        "column 'question'",
    }
    assert rows[2]["error"]["message"].startswith(f"{display(data)}:3: input 'threshold'")
    assert result.counts["bad_input"] == 2 and result.counts["succeeded"] == 2
    assert result.failed_ratio == 0.5


def test_an_earlier_runs_outputs_feed_a_later_run(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"runs_root": tmp_path / "runs", "cache_dir": tmp_path / "cache"}
    first = flowkit.run(
        FLOW,
        write_jsonl(
            tmp_path / "app.jsonl",
            [{"question": "Q0", "answer": "A0"}, {"question": "Q1", "answer": "A1"}],
        ),
        **kw,
    )
    questions = write_jsonl(tmp_path / "q.jsonl", [{"question": f"again {i}"} for i in range(2)])
    second = flowkit.run(
        FLOW, questions, prior_run=first.run_dir, mapping={"answer": "${run.outputs.answer}"}, **kw
    )
    assert [r["outputs"] for r in second.rows()] == [
        {"asked": "again 0", "answer": "A0"},
        {"asked": "again 1", "answer": "A1"},
    ]
    assert second.info["mapping"]["answer"] == "${run.outputs.answer}"
    # A row the earlier run does not have is a bad row, not a crash.
    more = write_jsonl(tmp_path / "more.jsonl", [{"question": f"q{i}"} for i in range(3)])
    third = flowkit.run(
        FLOW, more, prior_run=first.run_dir, mapping={"answer": "${run.outputs.answer}"}, **kw
    )
    assert [r["status"] for r in third.rows()] == ["ok", "ok", "bad_input"]


def test_a_csv_header_is_the_column_list(tmp_path: Path) -> None:
    data = write(tmp_path / "d.csv", "question,answer,threshold\nQ,A,0.8\n")
    result = flowkit.run(FLOW, data, runs_root=tmp_path / "runs", cache_dir=tmp_path / "cache")
    assert next(result.rows())["inputs"] == {"question": "Q", "answer": "A", "threshold": 0.8}
