"""Runs Prompt Flow DAG folders with Prompt Flow itself: the oracle of the differential tests.

Executed by the oracle virtualenv's python (`.ci/pf-oracle`), never imported by flowkit's tests:
it reads a job (JSON on stdin: the folders, their rows, the offline judge's address) and writes,
per folder, each row's status, flow outputs and node outputs, and the metrics the aggregation
nodes log (JSON, into the file the job names). Many folders go through one interpreter start,
which is what keeps the differential test fast. It uses Prompt Flow's executor as `pf run
create` does per line (defaults, input types, activate, variants), then the aggregation over the
completed lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _plain(value: Any) -> Any:
    """A JSON value for a node output (Prompt Flow may return tuples, objects...)."""
    return json.loads(json.dumps(value, default=repr))


def _transpose(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    keys = {k for row in rows for k in row}
    return {k: [row.get(k) for row in rows] for k in keys}


def _connection(job: dict[str, Any], kind: str) -> dict[str, Any]:
    """An OpenAI or Azure OpenAI connection to the offline judge (which serves both routes)."""
    if kind == "azure":
        value = {
            "api_key": job["api_key"],
            "api_base": job["base_url"].removesuffix("/v1"),
            "api_type": "azure",
            "api_version": "2024-02-01",
        }
        return {"type": "AzureOpenAIConnection", "module": "promptflow.connections", "value": value}
    value = {"api_key": job["api_key"], "base_url": job["base_url"]}
    return {"type": "OpenAIConnection", "module": "promptflow.connections", "value": value}


def run_folder(executor_class: Any, job: dict[str, Any], folder: dict[str, Any]) -> dict[str, Any]:
    connections = {name: _connection(job, kind) for name, kind in job["connections"].items()}
    path = Path(folder["dir"])
    try:
        executor = executor_class.create(
            path / "flow.dag.yaml", connections, working_dir=path, raise_ex=False
        )
    except Exception as err:  # the flow does not load: that is the result
        return {"error": f"{type(err).__name__}: {err}"}
    rows, done_inputs, done_aggregation = [], [], []
    for index, row in enumerate(folder["rows"]):
        result = executor.exec_line(dict(row), index=index)
        status = result.run_info.status.value
        nodes = {
            name: {"status": info.status.value, "output": _plain(info.output)}
            for name, info in result.node_run_infos.items()
        }
        error = result.run_info.error
        rows.append(
            {
                "line": index,
                "status": status,
                "outputs": _plain(result.output),
                "nodes": nodes,
                "error": error.get("message") if isinstance(error, dict) else None,
            }
        )
        if status == "Completed":
            done_inputs.append(dict(result.run_info.inputs or {}))
            done_aggregation.append(dict(result.aggregation_inputs or {}))
    metrics: dict[str, Any] = {}
    aggregation_nodes: dict[str, Any] = {}
    if executor.has_aggregation_node and done_inputs:
        result = executor.exec_aggregation(_transpose(done_inputs), _transpose(done_aggregation))
        metrics = _plain(result.metrics or {})
        aggregation_nodes = {
            name: {"status": info.status.value, "output": _plain(info.output)}
            for name, info in result.node_run_infos.items()
        }
    return {"rows": rows, "metrics": metrics, "aggregation_nodes": aggregation_nodes}


def main() -> None:
    job = json.load(sys.stdin)
    from promptflow.executor import FlowExecutor

    results = [run_folder(FlowExecutor, job, folder) for folder in job["folders"]]
    # A file, not stdout: Prompt Flow's loggers write there.
    Path(job["results"]).write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    main()
