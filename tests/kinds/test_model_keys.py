"""What picks the model a node's calls reach is in its cache key, and nothing else of the
endpoint is: an Azure connection's ``deployment`` (its chat requests name it in their path)
joins the model name in an llm node's key, so editing it reruns the node instead of reporting
one deployment's answers as another's (over the local test server)."""

from __future__ import annotations

from pathlib import Path

import flowkit
from flowkit.engine.context import RunContext
from flowkit.engine.prepare import bind
from flowkit.flow.loader import load_flow
from flowkit.flow.node_key import static_key
from flowkit.llm.config import load_settings
from flowkit.runs.config import RunConfig
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

ROWS = 4

FLOW = """
    name: keyed
    inputs: {q: {type: string}}
    outputs: {said: ${judge.output}, vector: ${embed.output}}
    nodes:
      - name: judge
        type: llm
        params: {temperature: 0}
        messages: [{role: user, content: "Say something about {{ q }}"}]
        inputs: {q: ${inputs.q}}
      - {name: embed, type: embedding, model: emb-model, inputs: {text: ${inputs.q}}}
    """


def _project(workdir: Path, server: LocalServer, deployment: str) -> None:
    """flowkit.yaml with an Azure connection pinned to ``deployment`` (the default) and an
    OpenAI-style one, both on the test server; the default model is ``m1`` for both."""
    write(
        workdir / "flowkit.yaml",
        f"""
        default_connection: az
        default_model: m1
        connections:
          az: {{type: azure, azure_endpoint: "{server.url}", api_version: "2024-06-01",
                api_key: k, deployment: {deployment}, timeout: 45, max_retries: 5}}
          oa: {{type: openai, base_url: "{server.base_url}", api_key: k}}
        """,
    )


Counts = dict[str, int]


def _run(server: LocalServer, name: str, **options: object) -> tuple[Counts, Counts]:
    """(requests per model the server saw, cache hits per node) of one run of the flow."""
    server.reset()
    result = flowkit.run("keyed.yaml", "data.jsonl", name=name, cache_dir="cache", **options)
    assert result.counts["succeeded"] == ROWS
    hits: dict[str, int] = {}
    for trace in read_jsonl(result.run_dir / "traces.jsonl"):
        hits[trace["node"]] = hits.get(trace["node"], 0) + bool(trace["cache_hit"])
    return dict(server.stats()["by_model"]), hits


def test_an_edited_azure_deployment_reruns_the_llm_node(
    llm_server: LocalServer, workdir: Path
) -> None:
    write(workdir / "keyed.yaml", FLOW)
    write_jsonl(workdir / "data.jsonl", [{"q": f"topic {i}"} for i in range(ROWS)])
    _project(workdir, llm_server, "dep1")
    # Chat requests go to the pinned deployment; embedding requests name their model.
    assert _run(llm_server, "dep1") == ({"dep1": ROWS, "emb-model": 1}, {"judge": 0, "embed": 0})

    _project(workdir, llm_server, "dep2")
    # The judge asks dep2 afresh; the embedding model is unchanged and its cache still answers.
    assert _run(llm_server, "dep2") == ({"dep2": ROWS}, {"judge": 0, "embed": ROWS})
    # Another connection to the judge's model name reaches another model: not dep2's answers
    # (the embedding model is the same by name on both: its cache answers).
    assert _run(llm_server, "oa", connection="oa") == ({"m1": ROWS}, {"judge": 0, "embed": ROWS})
    # Timeouts and retries are no key ingredients: back on dep2, everything comes from the cache.
    write(
        workdir / "flowkit.yaml",
        (workdir / "flowkit.yaml").read_text().replace("timeout: 45, max_retries: 5", "timeout: 9"),
    )
    assert _run(llm_server, "again") == ({}, {"judge": ROWS, "embed": ROWS})


def test_an_endpoint_without_a_deployment_keeps_the_key_it_had(tmp_path: Path) -> None:
    """Caches made before the deployment entered keys stay valid: for an OpenAI-style endpoint
    (and an Azure one that pins no deployment) an llm or embedding node's run-time key is the
    model name alone, as it always was."""
    flow = load_flow(write(tmp_path / "keyed.yaml", FLOW))
    azure = {"AZURE_OPENAI_ENDPOINT": "http://127.0.0.1:9", "AZURE_OPENAI_API_KEY": "k"}
    for env in (
        {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"},
        {**azure, "OPENAI_API_VERSION": "2024-06-01"},
    ):
        settings = load_settings(tmp_path, env={**env, "FLOWKIT_MODEL": "m1"})
        bound = bind(flow, RunContext(RunConfig().run_options(), settings))
        for name, model in (("judge", "m1"), ("embed", "emb-model")):
            node = bound.nodes[name]
            assert dict(node.run_parts) == {"model": model}
            assert node.static_key == static_key(flow.nodes[name], {"model": model})
