"""The offline judge answers the reply forms that Prompt Flow evaluation prompts ask for: a bare
number after worked examples, JSON shaped like an example, a filled-in reply template, a score
on the prompt's own scale, and Azure clients that put `/openai/deployments/…` after `/v1`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import openai
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import read_json, read_jsonl

FORMS = Path(__file__).parent / "forms"
METRICS = ("stars", "entailed", "sorted_statements", "mark", "clarity")


def test_every_prompt_form_gets_a_reply_its_parser_reads(
    llm_server: LocalServer, workdir: Path
) -> None:
    result = CliRunner().invoke(
        main, ["run", str(FORMS), "--data", str(FORMS / "data.jsonl"), "-q"]
    )
    assert result.exit_code == 0, result.output
    run = max((workdir / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    rows = read_jsonl(run / "outputs.jsonl")
    assert [r["status"] for r in rows] == ["ok", "ok"], rows
    # Row 0's answer is copied from its context and truth; row 1's shares nothing with them.
    for name in METRICS:
        grounded, unrelated = (r["outputs"][name] for r in rows)
        assert grounded > unrelated, (name, grounded, unrelated)
    assert 1 <= rows[1]["outputs"]["clarity"] < rows[0]["outputs"]["clarity"] <= 3
    metrics = read_json(run / "metrics.json")
    metrics = metrics.get("metrics", metrics)
    for name in METRICS:
        values = [r["outputs"][name] for r in rows]
        assert metrics[name] == metrics[f"forms.{name}"] == round(sum(values) / 2, 2)
        assert not math.isnan(metrics[name])
    # 4 llm nodes per row, plus the Azure client's call from the python tool.
    assert llm_server.stats()["by_endpoint"]["chat.completions"] == 10


def ask(client: openai.OpenAI, prompt: str, **params: object) -> str:
    reply = client.chat.completions.create(
        model="flowkit-test", messages=[{"role": "user", "content": prompt}], **params
    )
    return reply.choices[0].message.content or ""


def test_json_mirrors_the_example_even_when_the_example_is_loose(llm_server: LocalServer) -> None:
    client = openai.OpenAI(base_url=llm_server.base_url, api_key="sk-local-test")
    prompt = (
        "Judge the conversation. Output JSON like the example.\n"
        "Example Output:\n"
        '{\n  "score": 4\n  "overall": "fine",\n  "noncommittal": false\n}\n'
        "Conversation:\n"
        "{'conversation': 'User: Where is the station?\\nBot: The station is north of the "
        "bridge.\\nUser: Is it open?\\nBot: I don\\'t know.\\n'}\n"
        "Output:"
    )
    answer = json.loads(ask(client, prompt))
    assert set(answer) == {"score", "overall", "noncommittal"}
    assert 1 <= answer["score"] <= 5 and isinstance(answer["overall"], str)
    assert answer["noncommittal"] is True  # the bot said it doesn't know


def test_a_bare_score_follows_the_prompts_scale(llm_server: LocalServer) -> None:
    client = openai.OpenAI(base_url=llm_server.base_url, api_key="sk-local-test")
    form = "Rate the summary, from 0 to 10. Reply with the score, nothing else.\nSummary: {}\n"
    good = ask(client, form.format("The river floods every spring after the snow melts."))
    poor = ask(client, form.format("river"))
    assert good.isdigit() and poor.isdigit() and 0 <= int(poor) < int(good) <= 10


def test_azure_clients_reach_the_deployment_route_with_or_without_v1(
    llm_server: LocalServer,
) -> None:
    for endpoint in (llm_server.base_url, llm_server.base_url.removesuffix("/v1")):
        client = openai.AzureOpenAI(
            azure_endpoint=endpoint, api_version="2024-02-01", api_key="sk-local-test"
        )
        reply = client.chat.completions.create(
            model="my-deployment", messages=[{"role": "user", "content": "[[reply: hello]]"}]
        )
        assert reply.choices[0].message.content == "hello"
        assert reply.model == "my-deployment"
