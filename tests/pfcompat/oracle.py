"""The differential test's machinery: Prompt Flow DAG folders run through Prompt Flow itself (the
oracle virtualenv, `.ci/pf-oracle`) and through flowkit, each against its own offline judge that
records the requests it gets, then compared row by row.

Compared: each row's status, flow outputs and node outputs (a node Prompt Flow bypasses is one
flowkit skips), the metrics the aggregation nodes log, and the chat requests the llm nodes send
(messages, roles, model and parameters, as a multiset per folder). A difference fails the test
unless a normaliser named after a section of docs/prompt-flow-differences.md removes it; the
test checks that every normaliser used is documented there.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import REPO, read_jsonl

ORACLE_VENV = Path(os.environ.get("FLOWKIT_PF_ORACLE", REPO / ".pf-oracle"))
RUNNER = Path(__file__).with_name("pf_runner.py")
DIFFERENCES = REPO / "docs" / "prompt-flow-differences.md"
API_KEY = "sk-oracle-test"


def oracle_python() -> Path | None:
    """The oracle virtualenv's python, when `.ci/pf-oracle` has built it."""
    python = ORACLE_VENV / "bin" / "python"
    return python if python.is_file() else None


def documented() -> set[str]:
    """The ids of the documented differences: `## id: title` sections of the differences page."""
    return set(re.findall(r"^## `([\w-]+)`", DIFFERENCES.read_text(encoding="utf-8"), re.M))


@dataclass
class Case:
    """One folder and the rows it runs, with the connections its nodes name (openai or azure)."""

    folder: Path
    rows: list[dict[str, Any]]
    connections: dict[str, str] = field(default_factory=lambda: {"open_ai": "openai"})


def run_prompt_flow(cases: list[Case], base_url: str, work: Path) -> list[dict[str, Any]]:
    """Every case through Prompt Flow in one interpreter; its home folder is a temporary one."""
    python = oracle_python()
    assert python is not None, "the oracle virtualenv is missing: run .ci/pf-oracle"
    connections: dict[str, str] = {}
    for case in cases:
        connections.update(case.connections)
    results = work / "pf-results.json"
    job = {
        "api_key": API_KEY,
        "base_url": base_url,
        "connections": connections,
        "folders": [{"dir": str(c.folder), "rows": c.rows} for c in cases],
        "results": str(results),
    }
    home = work / "pf-home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "PF_HOME_DIRECTORY": str(home / ".promptflow"),
        "PF_DISABLE_TRACING": "true",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    done = subprocess.run(
        [str(python), str(RUNNER)],
        input=json.dumps(job),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and results.is_file(), done.stderr[-4000:]
    return json.loads(results.read_text(encoding="utf-8"))


def run_flowkit(case: Case, work: Path) -> dict[str, Any]:
    """The case through flowkit, read back in the runner's shape."""
    import flowkit

    out = work / f"fk-{case.folder.name}"
    try:
        flowkit.run(case.folder, case.rows, output=out, use_cache=False, trace="full")
    except flowkit.FlowkitError as err:
        return {"error": str(err)}
    traces = read_jsonl(out / "traces.jsonl")
    rows = []
    for rec in sorted(read_jsonl(out / "outputs.jsonl"), key=lambda r: r["line"]):
        nodes = {
            t["node"]: {"status": t["status"], "output": t.get("output")}
            for t in traces
            if t["line"] == rec["line"]
        }
        rows.append(
            {
                "line": rec["line"],
                "status": rec["status"],
                "outputs": rec.get("outputs"),
                "nodes": nodes,
            }
        )
    metrics_file = out / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    metrics = metrics.get("metrics", metrics)
    aggregation = {
        t["node"]: {"status": t["status"], "output": t.get("output")}
        for t in traces
        if t["line"] == -1
    }
    return {"rows": rows, "metrics": metrics, "aggregation_nodes": aggregation}


Normaliser = Callable[[dict[str, Any]], dict[str, Any]]


def _sampling_defaults(request: dict[str, Any]) -> dict[str, Any]:
    """`sampling-defaults`: Prompt Flow sends temperature 1 and top_p 1 (and stream false) when a
    node sets none; flowkit leaves them to the API, whose defaults are those values."""
    out = {k: v for k, v in request.items() if not (k == "stream" and v is False)}
    out.setdefault("temperature", 1.0)
    out.setdefault("top_p", 1.0)
    return out


_FLOAT_PARAMS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


def _number_types(request: dict[str, Any]) -> dict[str, Any]:
    """`number-types`: Prompt Flow converts a node's literal inputs to the tool's declared types
    (`temperature: 0` is sent as 0.0); flowkit sends the number the YAML holds. JSON readers,
    the API's included, take both as the same number."""
    return {
        k: float(v) if k in _FLOAT_PARAMS and isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in request.items()
    }


REQUEST_NORMALISERS: dict[str, Normaliser] = {
    "sampling-defaults": _sampling_defaults,
    "number-types": _number_types,
}
"""Documented differences in what is sent, applied to both sides' requests."""


DIFFERENCES_USED = {*REQUEST_NORMALISERS, "aggregation-output", "bypassed-output-property"}
"""Every documented difference the comparison allows (each a section of the differences page)."""


def canonical_requests(requests: list[dict[str, Any]]) -> list[str]:
    out = []
    for request in requests:
        for normalise in REQUEST_NORMALISERS.values():
            request = normalise(request)
        out.append(json.dumps(request, sort_keys=True))
    return sorted(out)


_PF_STATUS = {"Completed": "ok", "Bypassed": "skipped", "Failed": "failed"}


def compare(name: str, pf: dict[str, Any], fk: dict[str, Any]) -> list[str]:
    """Every difference between the oracle's result for a folder and flowkit's, as text."""
    if "error" in pf or "error" in fk:
        if ("error" in pf) != ("error" in fk):
            return [
                f"{name}: loads in one only: pf={pf.get('error')!r} flowkit={fk.get('error')!r}"
            ]
        return []
    found: list[str] = []
    for pf_row, fk_row in zip(pf["rows"], fk["rows"], strict=True):
        where = f"{name} row {pf_row['line']}"
        pf_ok, fk_ok = pf_row["status"] == "Completed", fk_row["status"] == "ok"
        if _bypassed_property(pf_row, fk_row):
            continue
        if pf_ok != fk_ok:
            found.append(
                f"{where}: status pf={pf_row['status']} ({pf_row.get('error')}) "
                f"flowkit={fk_row['status']}"
            )
            continue
        # Prompt Flow's line result carries the row's line_number among the outputs (its record
        # format, as flowkit's `line`), not a flow output.
        pf_outputs = {k: v for k, v in (pf_row["outputs"] or {}).items() if k != "line_number"}
        if pf_ok and pf_outputs != fk_row["outputs"]:
            found.append(f"{where}: outputs pf={pf_outputs!r} flowkit={fk_row['outputs']!r}")
        found += _nodes(where, pf_row["nodes"], fk_row["nodes"])
    # `aggregation-output`: flowkit keeps an aggregation node's logged metrics as its output,
    # not the function's return value, which no flow output can read in either tool.
    found += [
        f"{name}: aggregation node {n} status pf={info['status']} flowkit="
        f"{fk['aggregation_nodes'].get(n, {}).get('status')}"
        for n, info in pf["aggregation_nodes"].items()
        if _PF_STATUS.get(info["status"]) != fk["aggregation_nodes"].get(n, {}).get("status")
    ]
    for key, value in pf["metrics"].items():
        if fk["metrics"].get(key) != value:
            found.append(f"{name}: metric {key} pf={value!r} flowkit={fk['metrics'].get(key)!r}")
    return found


def _bypassed_property(pf_row: dict[str, Any], fk_row: dict[str, Any]) -> bool:
    """`bypassed-output-property`: a flow output reading a property of a node that activate
    bypassed fails the row in Prompt Flow; flowkit gives that output null."""
    error = pf_row.get("error") or ""
    return (
        pf_row["status"] == "Failed"
        and fk_row["status"] == "ok"
        and error.startswith("Flow execution failed. Invalid property")
        and any(v is None for v in (fk_row["outputs"] or {}).values())
    )


def _nodes(where: str, pf: dict[str, Any], fk: dict[str, Any]) -> list[str]:
    found = []
    for node, info in pf.items():
        mine = fk.get(node)
        status = _PF_STATUS.get(info["status"], info["status"])
        if mine is None:
            if status != "skipped":  # flowkit traces no node it never reached
                found.append(f"{where}: node {node} ran in pf only ({info['status']})")
            continue
        if status != mine["status"]:
            found.append(
                f"{where}: node {node} status pf={info['status']} flowkit={mine['status']}"
            )
        elif status == "ok" and info["output"] != mine["output"]:
            found.append(
                f"{where}: node {node} output pf={info['output']!r} flowkit={mine['output']!r}"
            )
    return found
