"""Strict where it matters: --where paths, literal --map values that name a column, comparing
unlike runs, gates on metrics the flow cannot produce, and bad sub-flow references."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES, python_flow, write, write_jsonl


def flowkit(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def test_where_reads_the_flow_name_prefix_and_refuses_unknown_paths(
    llm_server: LocalServer, workdir: Path
) -> None:
    ran = flowkit("run", "groundedness", "--data", EXAMPLES / "qa.jsonl", "--name", "g", "-q")
    assert ran.exit_code == 0, ran.output
    # The README's own example: on a groundedness run, groundedness.score is its score output.
    low = flowkit("trace", "g", "--where", "groundedness.score<3", "--json")
    assert low.exit_code == 0, low.output
    high = flowkit("trace", "g", "--where", "score>=3", "--json")
    assert len(low.stdout.splitlines()) + len(high.stdout.splitlines()) == 6
    typo = flowkit("trace", "g", "--where", "groundedness.scor<3")
    assert typo.exit_code == 2
    assert typo.stderr == (
        "error: --where groundedness.scor<3: run g has no output 'groundedness.scor' (did you "
        "mean 'groundedness.score'?); its outputs: score, result, reason, raw, turn_scores\n"
    )
    text = flowkit("trace", "g", "--where", "score<high")
    assert text.exit_code == 2
    assert text.stderr.startswith(
        "error: --where 'score<high': 'high' is not a number, and < compares numbers"
    )


def test_a_literal_map_value_that_names_a_column_is_warned_about(workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"response": "Paris", "truth": "Paris"}])
    result = flowkit(
        "run",
        "f1_score",
        "--data",
        "d.jsonl",
        "--map",
        "answer=response",
        "--map",
        "ground_truth=${data.truth}",
        "-q",
    )
    assert result.exit_code == 0, result.output
    assert (
        "warning: --map answer=response is the literal text 'response' on every row, and the "
        "data has a column 'response'; to read the column write --map answer='${data.response}'"
    ) in result.stderr


def test_compare_warns_about_other_flows_and_other_inputs(workdir: Path) -> None:
    def rows(answer: str, truth: str) -> list[dict[str, str]]:
        return [{"answer": f"{answer}{i}", "ground_truth": f"{truth}{i}"} for i in range(4)]

    write_jsonl(workdir / "a.jsonl", rows("a", "t"))
    write_jsonl(workdir / "b.jsonl", rows("b", "u"))  # other data
    write_jsonl(workdir / "c.jsonl", rows("c", "t"))  # the same data, another app's answers
    for flow, data, name in (
        ("f1_score", "a.jsonl", "f1a"),
        ("f1_score", "b.jsonl", "f1b"),
        ("f1_score", "c.jsonl", "f1c"),
        ("exact_match", "a.jsonl", "em"),
    ):
        assert flowkit("run", flow, "--data", data, "--name", name, "-q").exit_code == 0
    same = flowkit("compare", "f1a", "f1a")
    assert "warning" not in same.stdout
    other_flow = flowkit("compare", "f1a", "em")
    assert "warning: the runs are of different flows ('f1_score' and 'exact_match')" in " ".join(
        other_flow.stdout.split()
    )
    other_rows = flowkit("compare", "f1a", "f1b")
    assert "warning: 4 of 4 paired rows have different inputs (first: line 0)" in " ".join(
        other_rows.stdout.split()
    )
    other_answers = flowkit("compare", "f1a", "f1c")
    assert other_answers.exit_code == 0
    assert "warning" not in other_answers.stdout


def test_a_gate_on_a_metric_the_flow_cannot_produce_fails_before_any_row(workdir: Path) -> None:
    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    result = flowkit("run", "f1_score", "--data", "d.jsonl", "--gate", "f1score.mean>=0.5")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --gate f1score.mean>=0.5: flow 'f1_score' cannot produce metric 'f1score.mean' "
        "(did you mean 'f1_score.mean'?); its metrics start with 'f1_score.'\n"
        "  hint: nothing was run\n"
    )
    assert not (workdir / "runs").exists()
    suite = flowkit("run", "qa_suite", "--data", "d.jsonl", "--gate", "f1_score.mean>=0.5", "-q")
    assert "cannot produce" not in suite.stderr


def test_a_gate_on_a_misspelt_key_fails_before_any_row(
    llm_server: LocalServer, workdir: Path
) -> None:
    """score_summary declares its keys, so a wrong key after a right prefix is known now."""
    result = flowkit(
        "run", "groundedness", "--data", EXAMPLES / "qa.jsonl", "--gate", "groundedness.meen>=3"
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --gate groundedness.meen>=3: flow 'groundedness' cannot produce metric "
        "'groundedness.meen' (did you mean 'groundedness.mean'?); it reports "
        "groundedness.count, groundedness.invalid, groundedness.invalid_rate, "
        "groundedness.mean, groundedness.pass_rate, groundedness.stdev\n"
        "  hint: nothing was run\n"
    )
    assert not (workdir / "runs").exists()
    assert llm_server.stats()["requests"] == 0


def test_a_gate_on_a_misspelt_databricks_name_fails_before_any_row(
    llm_server: LocalServer, workdir: Path
) -> None:
    """Every aggregate of rag_suite declares its keys, so its unprefixed names are known too."""
    name = "response/llm_judged/groundedness/rating/percentag"
    result = flowkit(
        "run", "rag_suite", "--data", EXAMPLES / "agent_eval.jsonl", "--gate", f"{name}>=0.5"
    )
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(
        f"error: --gate {name}>=0.5: flow 'rag_suite' cannot produce metric '{name}' "
        f"(did you mean '{name}e'?); its unprefixed names are agent/latency_seconds/average, "
    )
    assert "retrieval/ground_truth/document_recall/average, " in first
    assert result.stderr.endswith("\n  hint: nothing was run\n")
    assert not (workdir / "runs").exists()
    assert llm_server.stats()["requests"] == 0


def test_a_gate_on_a_key_known_only_at_run_time_is_checked_after_the_run(workdir: Path) -> None:
    """classification_accuracy's per-class keys depend on the labels in the data."""
    data = EXAMPLES / "classification.jsonl"
    gate = "classification_accuracy.class.no_such_label.f1>=0.5"
    result = flowkit("run", "classification_accuracy", "--data", data, "--gate", gate, "-q")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"error: gate {gate}: no metric 'classification_accuracy.class.no_such_label.f1'"
    )
    assert (workdir / "runs").is_dir()


def test_a_misspelt_gate_on_a_custom_flow_fails_before_any_row(workdir: Path) -> None:
    """An undeclared aggregate whose every return is a dict literal: its keys are in its source."""
    aggregate = (
        "import statistics\n\ndef agg(ys):\n    if not ys:\n        return {'mean': 0.0}\n"
        "    return {'mean': statistics.mean(ys)}\n"
    )
    python_flow(workdir, "def f(x):\n    return x\n\n" + aggregate, "agg", node="politeness")
    write_jsonl(workdir / "d.jsonl", [{"x": 3}])
    result = flowkit("run", "t.yaml", "--data", "d.jsonl", "--gate", "t.meen>=3")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --gate t.meen>=3: flow 't' cannot produce metric 't.meen' (did you mean "
        "'t.mean'?); it reports t.mean\n  hint: nothing was run\n"
    )
    assert not (workdir / "runs").exists()
    assert flowkit("run", "t.yaml", "--data", "d.jsonl", "--gate", "t.mean>=3").exit_code == 0


def test_a_gate_on_keys_known_only_after_the_run_is_warned_about_first(workdir: Path) -> None:
    module = "def f(x):\n    return x\n\ndef agg(ys):\n    return dict(mean=sum(ys) / len(ys))\n"
    python_flow(workdir, module, "agg")
    write_jsonl(workdir / "d.jsonl", [{"x": 3}])
    result = flowkit("run", "t.yaml", "--data", "d.jsonl", "--gate", "t.meen>=3", "-q")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[0] == (
        "warning: --gate t.meen>=3 is checked only after the run: aggregate 'a' does not say its "
        "keys before it runs (declare them with @returns_keys, as `flowkit init` shows)"
    )
    assert lines[-1] == "error: gate t.meen>=3: no metric 't.meen' (did you mean 't.mean'?)"


def test_a_gate_on_a_key_one_aggregate_spells_is_not_warned_about_for_another(
    workdir: Path,
) -> None:
    """An undeclared aggregate beside one whose keys are known: a gate on a known key is checked
    before the run, silently; only a gate on another key waits for the run."""
    python_flow(
        workdir,
        "def f(x):\n    return x\n\ndef agg(ys):\n    return {'mean': sum(ys) / len(ys)}\n\n"
        "def other(ys):\n    return {k: len(ys) for k in ('alpha',)}\n",
        "agg",
    )
    flow = (workdir / "t.yaml").read_text("utf-8")
    flow += "  - {name: b, type: aggregate, source: m.py, function: other, "
    flow += "inputs: {ys: ${n.output}}}\n"
    (workdir / "t.yaml").write_text(flow, "utf-8")
    write_jsonl(workdir / "d.jsonl", [{"x": 3}])
    known = flowkit("run", "t.yaml", "--data", "d.jsonl", "--gate", "t.mean>=3", "-q")
    assert known.exit_code == 0, known.output
    assert "warning" not in known.stderr
    later = flowkit("run", "t.yaml", "--data", "d.jsonl", "--gate", "t.alpha>=1", "-q")
    assert later.exit_code == 0, later.output
    assert later.stderr.startswith("warning: --gate t.alpha>=1 is checked only after the run: ")
    # Two drop gates on one such metric: one warning.
    assert flowkit("run", "t.yaml", "--data", "d.jsonl", "-n", "base", "-q").exit_code == 0
    drops = ("--baseline", "base", "--gate-drop", "t.alpha>1", "--gate-drop", "t.alpha>2")
    twice = flowkit("run", "t.yaml", "--data", "d.jsonl", *drops, "-q")
    assert twice.exit_code == 0, twice.output
    assert twice.stderr.count("is checked only after the run") == 1, twice.stderr


def test_a_missing_sub_flow_names_the_referencing_flow_line_and_a_near_match(
    workdir: Path,
) -> None:
    write(
        workdir / "suite.yaml",
        """
        name: suite
        inputs: {answer: {type: string}, ground_truth: {type: string}}
        outputs: {f1: ${f1.output.score}}
        nodes:
          - name: f1
            type: flow
            flow: f1_scor
            inputs: {answer: ${inputs.answer}, ground_truth: ${inputs.ground_truth}}
          - name: other
            type: flow
            flow: no_such_flow.yaml
            inputs: {}
    """,
    )
    result = flowkit("validate", "suite.yaml")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: 2 problems\n"
        "suite.yaml:7: node 'f1': sub-flow 'f1_scor' not found: no file f1_scor and no "
        "built-in flow of that name (did you mean 'f1_score'?)\n"
        "suite.yaml:11: node 'other': sub-flow 'no_such_flow.yaml' not found: no file "
        "no_such_flow.yaml and no built-in flow of that name\n"
    )
