"""A resume must not mix two judges: a changed model, params or prompt is refused, naming each
change, unless changes are allowed; then every row runs again and the cache answers each
unchanged node, so only the changed nodes call anything (over the local test server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.runs.folder import read_run_info
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

ROWS = 12
FIRST = 5  # rows finished before the run was cut

NODES = """
import os


def count(text):
    # Every real call leaves a line: a cache hit leaves none.
    with open(os.environ["FLOWKIT_TEST_CALLS"], "a") as f:
        f.write(text + "\\n")
    return len(text.split())


def mean(scores, words):
    return {"score": sum(int(s) for s in scores) / len(scores), "words": sum(words)}
"""

FLOW = """
    name: judged
    inputs: {answer: {type: string}}
    outputs: {score: ${judge.output}, words: ${count.output}}
    nodes:
      - {name: count, type: python, source: nodes.py, function: count,
         inputs: {text: ${inputs.answer}}}
      - name: judge
        type: llm
        params: {temperature: 0}
        messages: [{role: user, content: "Rate this answer: {{ answer }}"}]
        inputs: {answer: ${inputs.answer}}
      - {name: mean, type: aggregate, source: nodes.py, function: mean,
         inputs: {scores: ${judge.output}, words: ${count.output}}}
"""

HINT = (
    "  hint: a resume must finish what was started; --allow-changes (allow_changes=True) "
    "reruns every row in this folder, the cache answering each unchanged node; or start a "
    "new run"
)


@pytest.fixture
def project(llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write(workdir / "nodes.py", NODES)
    write(workdir / "judged.yaml", FLOW)
    rows = [{"answer": f"answer {i} [[reply: {1 + i % 5}]]"} for i in range(ROWS)]
    write_jsonl(workdir / "data.jsonl", rows)
    monkeypatch.setenv("FLOWKIT_TEST_CALLS", str(workdir / "calls.txt"))
    return workdir


def cut_run(project: Path, name: str = "cut", **options: object) -> Path:
    """A run that stopped after its first rows (as after kill -9), its cache kept."""
    result = flowkit.run("judged.yaml", "data.jsonl", name=name, cache_dir="cache", **options)
    outputs = result.run_dir / "outputs.jsonl"
    outputs.write_bytes(b"".join(outputs.read_bytes().splitlines(keepends=True)[:FIRST]))
    info = read_run_info(result.run_dir)
    write(result.run_dir / "run.json", json.dumps({**info, "status": "interrupted"}))
    (project / "calls.txt").unlink()
    return result.run_dir


def calls(project: Path) -> int:
    path = project / "calls.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_resume_under_another_model_is_refused_naming_the_node(
    project: Path, llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = cut_run(project)
    before = run_dir.joinpath("outputs.jsonl").read_bytes()
    monkeypatch.setenv("FLOWKIT_MODEL", "flowkit-test-2")  # flowkit.yaml or the env moved on
    llm_server.reset()

    with pytest.raises(UsageError) as refused:
        flowkit.resume("cut")

    assert str(refused.value) == (
        "run 'cut': the judging changed since the run; its rows would mix two judges:\n"
        "  node 'judge': model flowkit-test -> flowkit-test-2\n" + HINT
    )
    assert llm_server.stats()["chat_completions"] == 0 and calls(project) == 0
    assert run_dir.joinpath("outputs.jsonl").read_bytes() == before
    cli = CliRunner().invoke(main, ["run", "--resume", "cut", "-q"])
    assert cli.exit_code == 2
    assert cli.stderr.startswith("error: " + str(refused.value).splitlines()[0])


def test_allowed_changes_rerun_only_the_changed_node(
    project: Path, llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut_run(project)
    monkeypatch.setenv("FLOWKIT_MODEL", "flowkit-test-2")
    llm_server.reset()

    resumed = flowkit.resume("cut", allow_changes=True)

    # Every row's judge asked the new model; the unchanged python node came from the cache.
    assert llm_server.stats()["chat_completions"] == ROWS
    assert calls(project) == 0
    assert resumed.status == "completed" and resumed.counts["succeeded"] == ROWS
    judges = [t for t in read_jsonl(resumed.run_dir / "traces.jsonl") if t["node"] == "judge"]
    assert sorted(t["line"] for t in judges) == list(range(ROWS))
    assert {t["llm"]["model"] for t in judges} == {"flowkit-test-2"}
    clean = flowkit.run("judged.yaml", "data.jsonl", name="clean", use_cache=False)
    assert resumed.metrics == clean.metrics
    assert list(resumed.rows()) == list(clean.rows())
    info = read_run_info(resumed.run_dir)
    assert info["resumes"][-1]["changes"] == {
        "nodes": {"judge": ["model flowkit-test -> flowkit-test-2"]},
        "flow": False,
    }
    assert info["judging"]["judge"]["model"] == "flowkit-test-2"
    assert (
        "resumed with changes (node 'judge': model flowkit-test -> flowkit-test-2): every row "
        "ran again, the cache answered each unchanged node"
    ) in info["notices"]
    # Recorded as the run's judging now: a second resume finds nothing changed.
    llm_server.reset()
    assert flowkit.resume("cut").counts["succeeded"] == ROWS
    assert llm_server.stats()["chat_completions"] == 0


def test_changed_params_and_prompt_are_named_and_the_cli_allows_them(
    project: Path, llm_server: LocalServer
) -> None:
    cut_run(project)
    flow = project / "judged.yaml"
    flow.write_text(
        flow.read_text()
        .replace("params: {temperature: 0}", "params: {temperature: 0.5, seed: 7}")
        .replace("Rate this answer", "Grade this answer")
    )
    llm_server.reset()

    refused = CliRunner().invoke(main, ["run", "--resume", "cut", "-q"])

    assert refused.exit_code == 2
    assert refused.stderr == (
        "error: run 'cut': the judging changed since the run; its rows would mix two judges:\n"
        "  node 'judge': param seed (unset) -> 7, param temperature 0 -> 0.5, prompt text "
        "changed\n" + HINT + "\n"
    )
    allowed = CliRunner().invoke(main, ["run", "--resume", "cut", "--allow-changes", "-q"])
    assert allowed.exit_code == 0, allowed.output
    assert llm_server.stats()["chat_completions"] == ROWS
    assert calls(project) == 0
    info = read_run_info(project / "runs" / "cut")
    assert info["resumes"][-1]["changes"]["flow"] is True
    assert info["status"] == "completed" and info["counts"]["succeeded"] == ROWS


def test_without_a_cache_the_refusal_says_what_allowing_costs(
    project: Path, llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut_run(project, use_cache=False)
    monkeypatch.setenv("FLOWKIT_MODEL", "flowkit-test-2")

    with pytest.raises(UsageError) as refused:
        flowkit.resume("cut")

    assert refused.value.hint == (
        "a resume must finish what was started; --allow-changes (allow_changes=True) reruns "
        "every row in this folder, and, as this run keeps no cache (--no-cache), every node "
        "of every row is called again; or start a new run"
    )
    llm_server.reset()
    resumed = flowkit.resume("cut", allow_changes=True)
    assert llm_server.stats()["chat_completions"] == ROWS and calls(project) == ROWS
    assert (
        "resumed with changes (node 'judge': model flowkit-test -> flowkit-test-2): every row "
        "ran again, every node was called again (the run keeps no cache)"
    ) in read_run_info(resumed.run_dir)["notices"]


def test_an_unchanged_judge_resumes_the_unfinished_rows_only(
    project: Path, llm_server: LocalServer
) -> None:
    cut_run(project)
    llm_server.reset()

    resumed = flowkit.resume("cut", allow_changes=True)

    # Nothing changed: the finished rows are kept, whatever allow_changes says.
    assert llm_server.stats()["chat_completions"] == 0  # the cut rows' judges are cached
    assert calls(project) == 0
    assert "changes" not in read_run_info(resumed.run_dir)["resumes"][-1]
    assert resumed.counts["rows"] == ROWS
    # The rows after the cut ran again, both their nodes answered by the cache.
    assert resumed.counts["cache_hits"] == 2 * (ROWS - FIRST)


def test_allow_changes_goes_with_resume_only(project: Path) -> None:
    result = CliRunner().invoke(
        main, ["run", "judged.yaml", "--data", "data.jsonl", "--allow-changes"]
    )
    assert result.exit_code == 2
    assert result.stderr == "error: --allow-changes goes with --resume RUN only\n"


def test_allowed_code_change_reruns_the_python_node_and_no_judge(
    project: Path, llm_server: LocalServer
) -> None:
    cut_run(project)
    nodes = project / "nodes.py"
    nodes.write_text(nodes.read_text().replace("len(text.split())", "len(text.split()) + 1"))
    with pytest.raises(UsageError, match=r"flow 'judged' changed since the run \(nodes, prompts"):
        flowkit.resume("cut")
    llm_server.reset()

    resumed = flowkit.resume("cut", allow_changes=True)

    assert calls(project) == ROWS and llm_server.stats()["chat_completions"] == 0
    clean = flowkit.run("judged.yaml", "data.jsonl", name="clean", use_cache=False)
    assert resumed.metrics == clean.metrics
    assert read_run_info(resumed.run_dir)["resumes"][-1]["changes"] == {"nodes": {}, "flow": True}


def test_a_resume_with_another_azure_deployment_is_refused_naming_it(
    project: Path, llm_server: LocalServer
) -> None:
    """The deployment an Azure connection pins picks the model its chat calls reach, whatever
    the model label: a resume after it was edited would mix two judges."""
    azure = (
        "default_model: judge-label\nconnections:\n  az: {type: azure, azure_endpoint: "
        f'"{llm_server.url}", api_version: "2024-06-01", api_key: k, deployment: dep1}}\n'
    )
    write(project / "flowkit.yaml", azure)
    cut_run(project)
    write(project / "flowkit.yaml", azure.replace("dep1", "dep2"))
    llm_server.reset()

    with pytest.raises(UsageError) as refused:
        flowkit.resume("cut")

    assert str(refused.value) == (
        "run 'cut': the judging changed since the run; its rows would mix two judges:\n"
        "  node 'judge': deployment dep1 -> dep2\n" + HINT
    )
    assert llm_server.stats()["chat_completions"] == 0
    resumed = flowkit.resume("cut", allow_changes=True)
    assert llm_server.stats()["by_model"] == {"dep2": ROWS}
    assert read_run_info(resumed.run_dir)["judging"]["judge"]["deployment"] == "dep2"
