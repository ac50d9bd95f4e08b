"""`flowkit run DIR --variant '${node.variant_id}'` as `pf run create --variant`, and
`--variants all`: one run folder per variant, their metrics side by side."""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

from click.testing import CliRunner, Result

from flowkit.cli.main import main
from tests.pfcompat.test_pf_rules import SHOUT, VARIANTS_DAG
from tests.support import read_json, read_jsonl, write, write_jsonl

MEASURE = (
    "from promptflow.core import log_metric, tool\n\n\n@tool\ndef measure(texts: list):\n"
    "    log_metric('chars', sum(len(t) for t in texts))\n"
)


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def folder(workdir: Path) -> Path:
    flow = workdir / "shouter"
    dag = VARIANTS_DAG + (
        "- name: measure\n  type: python\n  source: {type: code, path: measure.py}\n"
        "  inputs: {texts: '${shout.output}'}\n  aggregation: true\n"
    )
    write(flow / "flow.dag.yaml", dag)
    write(flow / "shout.py", SHOUT)
    write(flow / "measure.py", MEASURE)
    write_jsonl(workdir / "data.jsonl", [{"x": "ab"}, {"x": "c"}])
    return flow


def test_a_variant_runs_in_place_of_the_default(workdir: Path) -> None:
    flow = folder(workdir)
    result = cli(
        "run",
        flow,
        "--data",
        workdir / "data.jsonl",
        "-q",
        "-n",
        "v1",
        "--variant",
        "${shout.variant_1}",
    )
    assert result.exit_code == 0, result.output
    rows = sorted(read_jsonl(workdir / "runs" / "v1" / "outputs.jsonl"), key=lambda r: r["line"])
    assert [r["outputs"]["y"] for r in rows] == ["ababab", "ccc"]
    assert read_json(workdir / "runs" / "v1" / "metrics.json")["chars"] == 9
    assert "note: node 'shout' runs its variant 'variant_1'" in result.output


def test_variant_mistakes_are_usage_errors(workdir: Path) -> None:
    flow = folder(workdir)
    data = workdir / "data.jsonl"
    for given, message in [
        (
            "shout.variant_1",
            "--variant 'shout.variant_1' must be written '${NODE.VARIANT_ID}', e.g. "
            "'${summarize.variant_1}'",
        ),
        ("${shot.variant_1}", "--variant ${shot.variant_1}: node 'shot' not found in the flow"),
        (
            "${shout.variant_2}",
            "--variant ${shout.variant_2}: variant 'variant_2' not found for node 'shout'",
        ),
    ]:
        result = cli("run", flow, "--data", data, "-q", "--variant", given)
        assert result.exit_code == 2
        assert message in " ".join(result.output.split()), result.output


def test_every_variant_runs_as_its_own_run_with_metrics_side_by_side(workdir: Path) -> None:
    flow = folder(workdir)
    result = cli(
        "run", flow, "--data", workdir / "data.jsonl", "-q", "-n", "cmp", "--variants", "all"
    )
    assert result.exit_code == 0, result.output
    chars = {}
    for variant in ("variant_0", "variant_1"):
        metrics = read_json(workdir / "runs" / f"cmp-shout-{variant}" / "metrics.json")
        chars[variant] = metrics["chars"]
    assert chars == {"variant_0": 3, "variant_1": 9}
    cells = [
        line.replace("│", " ").replace("┃", " ").split() for line in result.output.splitlines()
    ]
    assert ["chars", "3", "9"] in cells, result.output
    assert "flowkit compare runs/cmp-shout-variant_0 runs/cmp-shout-variant_1" in result.output


def test_a_variant_run_resumes_and_runs_on_process_workers_with_its_variant(
    workdir: Path,
) -> None:
    """The variant is part of what the run is: `--resume` (which takes no --variant) and a
    joblib worker process (which loads the flow itself) load the flow with it."""
    flow = folder(workdir)
    data = workdir / "data.jsonl"
    # Each command in a fresh context, as each is its own process for a user.
    started = contextvars.Context().run(
        cli, "run", flow, "--data", data, "-q", "-n", "part", "--variant", "${shout.variant_1}"
    )
    assert started.exit_code == 0, started.output
    outputs = workdir / "runs" / "part" / "outputs.jsonl"
    kept = [r for r in read_jsonl(outputs) if r["line"] == 0]
    outputs.write_text(json.dumps(kept[0]) + "\n", encoding="utf-8")  # as if interrupted
    resumed = contextvars.Context().run(cli, "run", "--resume", "part", "-q")
    assert resumed.exit_code == 0, resumed.output
    rows = sorted(read_jsonl(outputs), key=lambda r: r["line"])
    assert [r["outputs"]["y"] for r in rows] == ["ababab", "ccc"]
    on_workers = contextvars.Context().run(
        cli,
        "run",
        flow,
        "--data",
        data,
        "-q",
        "-n",
        "procs",
        "--variant",
        "${shout.variant_1}",
        "--backend",
        "loky",
    )
    assert on_workers.exit_code == 0, on_workers.output
    rows = sorted(read_jsonl(workdir / "runs" / "procs" / "outputs.jsonl"), key=lambda r: r["line"])
    assert [r["outputs"]["y"] for r in rows] == ["ababab", "ccc"]
