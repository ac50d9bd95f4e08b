"""A 200 that is not a chat completion is a failed attempt: retried, never recorded as an
empty reply, never cached (so a rerun after the endpoint is fixed gets real scores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write_jsonl

BAD_BODIES = {
    "hello": lambda: web.json_response({"hello": "world"}),
    "null": lambda: web.json_response({"id": "x", "object": "chat.completion", "choices": None}),
    "html": lambda: web.Response(
        text="<html><body>Gateway</body></html>", content_type="text/html"
    ),
}


@pytest.fixture
def project(llm_server: LocalServer, workdir: Path) -> Path:
    (workdir / "flowkit.yaml").write_text(
        "default_model: flowkit-test\n"
        "default_connection: local\n"
        "connections:\n"
        f"  local: {{base_url: '{llm_server.base_url}', max_retries: 1}}\n",
        "utf-8",
    )
    rows = [
        {"question": f"q{i}", "context": f"c {kind}", "answer": f"a{i}"}
        for i, kind in enumerate(BAD_BODIES)
    ]
    write_jsonl(workdir / "qa.jsonl", rows)
    return workdir


def _bad(body: dict[str, Any]) -> Any:
    text = str(body["messages"])
    return next((make() for kind, make in BAD_BODIES.items() if f"c {kind}" in text), None)


def test_a_malformed_200_is_retried_and_never_cached(
    project: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    llm_server.configure(hook=_bad)
    try:
        before = llm_server.stats()["requests"]
        broken = flowkit.run("groundedness", project / "qa.jsonl", cache_dir=cache, name="broken")
        sent = llm_server.stats()["requests"] - before
    finally:
        llm_server.configure(hook=None)
    assert broken.counts["failed"] == 3
    assert sent == 3 * 2  # one retry each (max_retries: 1)
    errors = [r["error"] for r in read_jsonl(broken.run_dir / "outputs.jsonl")]
    assert sorted(e["message"] for e in errors) == sorted(
        [
            "the endpoint answered 200 but not with a chat completion: 'choices' is missing "
            "or null",
            "the endpoint answered 200 but not with a chat completion: 'choices' is missing "
            "or null",
            "the endpoint answered 200 but not with a chat completion: a body of text starting "
            "'<html><body>Gateway</body></html>'",
        ]
    )
    fixed = flowkit.run("groundedness", project / "qa.jsonl", cache_dir=cache, name="fixed")
    assert fixed.counts["succeeded"] == 3
    # The python nodes around the judge may come from the cache; the judge's call never does.
    judged = [r for r in read_jsonl(fixed.run_dir / "traces.jsonl") if r["node"] == "judge"]
    assert len(judged) == 3 and not any(r.get("cache_hit") for r in judged)
    clean = flowkit.run("groundedness", project / "qa.jsonl", cache_dir=tmp_path / "c2", name="c")
    assert fixed.metrics == clean.metrics
