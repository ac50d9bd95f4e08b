"""A Prompt Flow tool that calls ``promptflow.tools`` chat from a thread it starts itself (its
own ThreadPoolExecutor, which inherits no context variables) reaches its run's model, in its
run's session, never the environment's model; with several runs in progress in the process,
a call whose run cannot be told fails its row naming the fix (over the local test server)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import read_json, read_jsonl, write

TOOL = """
    from concurrent.futures import ThreadPoolExecutor

    from promptflow.connections import AzureOpenAIConnection, OpenAIConnection
    from promptflow.core import tool
    from promptflow.tools.aoai import chat


    @tool
    def pooled(
        connection: AzureOpenAIConnection | OpenAIConnection, prompt: str, deployment_name: str
    ) -> str:
        with ThreadPoolExecutor(2) as pool:
            asked = pool.submit(
                chat, connection=connection, prompt=prompt, deployment_name=deployment_name
            )
            return asked.result()
    """
DAG = """
    inputs:
      question: {type: string}
    outputs:
      said: {type: string, reference: "${pooled.output}"}
    nodes:
    - name: pooled
      type: python
      source: {type: code, path: pooled.py}
      inputs:
        connection: open_ai_connection
        prompt: "user:\\n${inputs.question}"
        deployment_name: gpt-4
    """
FIX = "executor.submit(contextvars.copy_context().run, fn, *args)"


@pytest.fixture
def pooled(llm_server: LocalServer, workdir: Path) -> Any:
    """The tool's flow, loaded; the server answers each chat with the model it was asked."""
    write(workdir / "pooled" / "flow.dag.yaml", DAG)
    write(workdir / "pooled" / "pooled.py", TOOL)
    llm_server.configure(hook=lambda body: "model=" + body["model"])
    yield flowkit.load_flow(workdir / "pooled")
    llm_server.configure(hook=None, latency=0.0)


def _rows(name: str, count: int) -> list[dict[str, str]]:
    return [{"question": f"{name} question {i}?"} for i in range(count)]


def test_a_tool_calling_chat_from_its_own_thread_reaches_the_runs_model(
    pooled: Any, llm_server: LocalServer
) -> None:
    # The environment says flowkit-test (the fixture's FLOWKIT_MODEL); the run says judge-b.
    one = flowkit.run(pooled, _rows("one", 4), model="judge-b", use_cache=False, concurrency=1)
    assert [r["outputs"]["said"] for r in one.rows()] == ["model=judge-b"] * 4
    # One row at a time: each call is its row's, in its trace and token counts.
    traces = read_jsonl(one.run_dir / "traces.jsonl")
    assert [t["llm"]["request"]["model"] for t in traces] == ["judge-b"] * 4
    assert all(t["llm"]["usage"]["total_tokens"] > 0 for t in traces)
    # Rows at once: still the run's model (and the run's session: its rate limits, its usage).
    llm_server.reset()
    llm_server.configure(latency=0.05)  # the rows' tool calls overlap
    many = flowkit.run(pooled, _rows("many", 8), model="judge-b", use_cache=False, concurrency=4)
    assert [r["outputs"]["said"] for r in many.rows()] == ["model=judge-b"] * 8
    assert llm_server.stats()["by_model"] == {"judge-b": 8}
    # Which row a call of several at once belongs to is unknown: the run says so.
    notices = read_json(many.run_dir / "run.json")["notices"]
    assert any("contextvars.copy_context().run" in n for n in notices)


def test_two_runs_at_once_never_reach_each_others_model(
    pooled: Any, llm_server: LocalServer, workdir: Path
) -> None:
    """Two runs in threads with different models: a call from a tool's own thread reaches its
    own run's model, or (its run cannot be told) fails its row naming the fix; with the fix
    applied every call reaches its own run's model."""
    llm_server.configure(latency=0.05)  # the runs' tool calls overlap
    refused = _two_runs(pooled, llm_server)
    assert 0 < refused <= 16  # the runs overlapped: some calls could not be told apart
    tool = workdir / "pooled" / "pooled.py"
    fixed = TOOL.replace("chat, connection=", "contextvars.copy_context().run, chat, connection=")
    write(tool, "import contextvars\n" + fixed.replace("\n    ", "\n"))
    assert _two_runs(flowkit.load_flow(tool.parent), llm_server) == 0


def _two_runs(flow: Any, server: LocalServer) -> int:
    """Run ``flow`` over 8 rows twice at once, in threads, with models judge-a and judge-b:
    how many rows were refused (each with the fix named); every other row's call reached its
    own run's model, and no call reached any other model."""
    server.reset()
    start = threading.Barrier(2, timeout=20)
    done: dict[str, Any] = {}

    def run(model: str) -> None:
        start.wait()
        done[model] = flowkit.run(
            flow, _rows(model, 8), model=model, use_cache=False, concurrency=2, overwrite=True
        )

    threads = [threading.Thread(target=run, args=(m,)) for m in ("judge-a", "judge-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(done) == ["judge-a", "judge-b"]  # both runs ran to their end
    refused = 0
    for model, result in done.items():
        for row in read_jsonl(result.run_dir / "outputs.jsonl"):
            if "error" in row:
                refused += 1
                assert row["error"]["type"] == "UsageError"
                assert FIX in row["error"]["message"]
            else:
                assert row["outputs"]["said"] == f"model={model}"
    assert set(server.stats()["by_model"]) <= {"judge-a", "judge-b"}
    return refused


AGG_TOOL = """
    from promptflow.connections import AzureOpenAIConnection, OpenAIConnection
    from promptflow.core import log_metric, tool
    from promptflow.tools.aoai import chat


    @tool
    def summarize(
        connection: AzureOpenAIConnection | OpenAIConnection, answers: list, deployment_name: str
    ) -> dict:
        said = chat(
            connection=connection,
            prompt="user:\\n" + " ".join(answers),
            deployment_name=deployment_name,
        )
        log_metric("said_by_judge_b", float(said == "model=judge-b"))
        return {"said": said}
    """
AGG_DAG = """
    inputs:
      question: {type: string}
    outputs:
      echoed: {type: string, reference: "${echo.output}"}
    nodes:
    - name: echo
      type: python
      source: {type: code, path: echo.py}
      inputs: {text: "${inputs.question}"}
    - name: summarize
      type: python
      source: {type: code, path: summarize.py}
      aggregation: true
      inputs:
        connection: open_ai_connection
        answers: ${echo.output}
        deployment_name: gpt-4
    """
ECHO = """
    from promptflow.core import tool


    @tool
    def echo(text: str) -> str:
        return text
    """


def test_an_aggregation_tool_calling_chat_reaches_the_runs_model_and_keys_on_it(
    llm_server: LocalServer, workdir: Path, cache_dir: Path
) -> None:
    write(workdir / "agg" / "flow.dag.yaml", AGG_DAG)
    write(workdir / "agg" / "summarize.py", AGG_TOOL)
    write(workdir / "agg" / "echo.py", ECHO)
    llm_server.configure(hook=lambda body: "model=" + body["model"])
    try:
        rows = _rows("agg", 3)
        first = flowkit.run(workdir / "agg", rows, model="judge-b", cache_dir=cache_dir)
        assert first.metrics["said_by_judge_b"] == 1.0  # not the environment's flowkit-test
        other = flowkit.run(workdir / "agg", rows, model="judge-c", cache_dir=cache_dir)
        assert other.metrics["said_by_judge_b"] == 0.0  # another model: asked again, not cached
    finally:
        llm_server.configure(hook=None, latency=0.0)
