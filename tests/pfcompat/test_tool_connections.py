"""A Prompt Flow tool whose connection name comes from the data may reach any connection: its
key and its judging hold what every configured connection reaches (over the local test server).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import flowkit
from flowkit.errors import UsageError
from flowkit.runs.folder import read_run_info
from flowkit.runs.judging import changes, describe
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

TOOL = """
    from promptflow.connections import AzureOpenAIConnection
    from promptflow.core import tool
    from promptflow.tools.aoai import chat


    @tool
    def ask(q: str, connection: AzureOpenAIConnection) -> str:
        return chat(connection=connection, prompt="user:\\n" + q, deployment_name="x")
    """
DAG = """
    inputs:
      q: {type: string}
      conn: {type: string}
    outputs:
      a: {type: string, reference: "${ask.output}"}
    nodes:
    - name: ask
      type: python
      source: {type: code, path: ask.py}
      inputs:
        q: ${inputs.q}
        connection: CONNECTION
    """
HINT = (
    "  hint: a resume must finish what was started; --allow-changes (allow_changes=True) "
    "reruns every row in this folder, the cache answering each unchanged node; or start a "
    "new run"
)


def _configure(folder: Path, url: str, az2: str) -> None:
    conn = f'{{type: azure, azure_endpoint: "{url}", api_version: 2024-06-01, api_key: k'
    write(
        folder / "flowkit.yaml",
        f"default_connection: az1\nconnections:\n  az1: {conn}, deployment: m-a}}\n"
        f"  az2: {conn}, deployment: {az2}}}\n",
    )


@pytest.fixture
def folder(workdir: Path, llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLOWKIT_MODEL", "judge-label")  # the label; a deployment picks the model
    write(workdir / "flow" / "ask.py", TOOL)
    write_jsonl(workdir / "data.jsonl", [{"q": f"r{i}", "conn": "az2"} for i in range(4)])
    _configure(workdir, llm_server.url, "m-b")
    return workdir / "flow"


def _asked(folder: Path, connection: str, name: str) -> tuple[list[bool], list[str]]:
    """(per row, whether the tool came from the cache; the models its chat calls reached, the
    Azure deployment's name)."""
    write(folder / "flow.dag.yaml", DAG.replace("CONNECTION", connection))
    result = flowkit.run(folder, "data.jsonl", name=name, cache_dir="cache")
    traces = [t for t in read_jsonl(result.run_dir / "traces.jsonl") if t["node"] == "ask"]
    called = [t["llm"]["model"] for t in traces if not t["cache_hit"]]
    return [t["cache_hit"] for t in traces], called


def test_a_connection_named_by_the_data_puts_every_connection_in_the_key(
    folder: Path, workdir: Path, llm_server: LocalServer
) -> None:
    assert _asked(folder, "${inputs.conn}", "b") == ([False] * 4, ["m-b"] * 4)
    assert _asked(folder, "${inputs.conn}", "b2") == ([True] * 4, [])
    _configure(workdir, llm_server.url, "m-c")  # az2 now reaches another model
    assert _asked(folder, "${inputs.conn}", "c") == ([False] * 4, ["m-c"] * 4)
    judging = read_run_info(workdir / "runs" / "c")["judging"]["ask"]
    assert judging["connections"] == {
        "": {"deployment": "m-a", "model": "judge-label"},
        "az1": {"deployment": "m-a", "model": "judge-label"},
        "az2": {"deployment": "m-c", "model": "judge-label"},
        "openai": {"deployment": None, "model": "judge-label"},  # the environment's
    }


def test_a_literal_connection_keys_only_that_connection(
    folder: Path, workdir: Path, llm_server: LocalServer
) -> None:
    """A literal name reaches that connection (and the default): another's edit reruns nothing."""
    assert _asked(folder, "az1", "a") == ([False] * 4, ["m-a"] * 4)
    _configure(workdir, llm_server.url, "m-c")
    assert _asked(folder, "az1", "a2") == ([True] * 4, [])


def test_a_resume_after_a_connection_named_by_the_data_changed_is_refused_naming_it(
    folder: Path, workdir: Path, llm_server: LocalServer
) -> None:
    _asked(folder, "${inputs.conn}", "cut")
    run_dir = workdir / "runs" / "cut"
    outputs = run_dir / "outputs.jsonl"
    outputs.write_bytes(b"".join(outputs.read_bytes().splitlines(keepends=True)[:2]))
    write(run_dir / "run.json", json.dumps({**read_run_info(run_dir), "status": "interrupted"}))
    _configure(workdir, llm_server.url, "m-c")
    llm_server.reset()

    with pytest.raises(UsageError) as refused:
        flowkit.resume("cut")

    assert str(refused.value) == (
        "run 'cut': the judging changed since the run; its rows would mix two judges:\n"
        "  node 'ask': connection az2: deployment m-b -> m-c\n" + HINT
    )
    assert llm_server.stats()["chat_completions"] == 0
    resumed = flowkit.resume("cut", allow_changes=True)
    assert llm_server.stats()["by_model"] == {"m-c": 4}
    assert read_run_info(resumed.run_dir)["judging"]["ask"]["connections"]["az2"] == {
        "deployment": "m-c",
        "model": "judge-label",
    }


def test_a_tool_entry_recorded_before_connections_were_named_reads_as_one() -> None:
    """A run.json written before a tool's entry named its connections held its whole key under
    ``model``: a resume reads it as today's entry, one phrase per change."""
    before = {"ask": {"model": {"model": None, "connections": {"": {"deployment": "m-a"}}}}}
    now = {
        "ask": {
            "model": None,
            "connections": {"": {"deployment": "m-b"}, "az2": {"deployment": "m-c"}},
        }
    }
    assert describe(changes(before, now)) == [
        "node 'ask': connection (default): deployment m-a -> m-b, "
        "connection az2: (not reached) -> deployment m-c"
    ]
    assert changes(before, {"ask": _normal_copy(before["ask"])}) == {}


def _normal_copy(entry: dict[str, object]) -> dict[str, object]:
    model = entry["model"]
    assert isinstance(model, dict)
    return {"model": model["model"], "connections": model["connections"]}
