"""A Prompt Flow python tool that calls a model through `promptflow.tools` chat is keyed by the
model it reaches, and the run's model options reach it, as they do an llm node."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

TOOL = """
    from promptflow.connections import AzureOpenAIConnection, OpenAIConnection
    from promptflow.core import tool
    from promptflow.tools.aoai import chat


    @tool
    def ask_model(
        connection: AzureOpenAIConnection | OpenAIConnection, prompt: str, deployment_name: str
    ) -> str:
        return chat(connection=connection, prompt=prompt, deployment_name=deployment_name)
    """
DAG = """
    inputs:
      question: {type: string}
    outputs:
      framed: {type: string, reference: "${ask_model.output}"}
    nodes:
    - name: ask_model
      type: python
      source: {type: code, path: ask_model.py}
      inputs:
        connection: open_ai_connection
        prompt: "user:\\nHow many words in ${inputs.question}?"
        deployment_name: gpt-4
    """


def _tool_call(folder: Path, workdir: Path, name: str, *options: str) -> tuple[bool, str]:
    """(whether the tool's node came from the cache, the model its chat call asked for)."""
    args = ["run", str(folder), "--data", str(folder / "data.jsonl"), "--name", name, "-q"]
    result = CliRunner().invoke(main, [*args, "--cache-dir", "c", *options])
    assert result.exit_code == 0, result.output
    trace = next(
        t for t in read_jsonl(workdir / "runs" / name / "traces.jsonl") if t["node"] == "ask_model"
    )
    return trace["cache_hit"], trace["llm"]["request"]["model"]


def test_the_model_a_tool_reaches_is_in_its_key_and_the_model_options_reach_it(
    llm_server: LocalServer, workdir: Path
) -> None:
    """A flow of tools alone (no llm node): --model and --connections reach the tool's chat call,
    and a change of either reruns it instead of replaying the other model's answer."""
    folder = workdir / "tool_only"
    write(folder / "flow.dag.yaml", DAG)
    write(folder / "ask_model.py", TOOL)
    write_jsonl(folder / "data.jsonl", [{"question": "Where is Paris?"}])
    assert _tool_call(folder, workdir, "a", "--model", "judge-a") == (False, "judge-a")
    assert _tool_call(folder, workdir, "a2", "--model", "judge-a") == (True, "judge-a")
    assert _tool_call(folder, workdir, "b", "--model", "judge-b") == (False, "judge-b")
    pinned = ("--connections", "ask_model.deployment_name=judge-c")
    assert _tool_call(folder, workdir, "c", *pinned) == (False, "judge-c")
    assert _tool_call(folder, workdir, "c2", *pinned) == (True, "judge-c")


HELPER = """
    from promptflow.tools.aoai import chat


    def ask(connection, prompt, deployment_name):
        return chat(connection=connection, prompt=prompt, deployment_name=deployment_name)
    """
INDIRECT = """
    from asker import ask
    from promptflow.connections import AzureOpenAIConnection, OpenAIConnection
    from promptflow.core import tool


    @tool
    def ask_model(
        connection: AzureOpenAIConnection | OpenAIConnection, prompt: str, deployment_name: str
    ) -> str:
        return ask(connection, prompt, deployment_name)
    """


def test_a_tool_whose_helper_module_calls_chat_is_keyed_by_the_model_too(
    llm_server: LocalServer, workdir: Path
) -> None:
    """The chat call may sit in a module the tool's file imports: the model it reaches is in
    the tool's key all the same (another model's answers are never replayed)."""
    folder = workdir / "indirect"
    write(folder / "flow.dag.yaml", DAG)
    write(folder / "ask_model.py", INDIRECT)
    write(folder / "asker.py", HELPER)
    write_jsonl(folder / "data.jsonl", [{"question": "Where is Paris?"}])
    assert _tool_call(folder, workdir, "a", "--model", "judge-a") == (False, "judge-a")
    assert _tool_call(folder, workdir, "a2", "--model", "judge-a") == (True, "judge-a")
    assert _tool_call(folder, workdir, "b", "--model", "judge-b") == (False, "judge-b")
