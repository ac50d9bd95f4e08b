"""API keys never reach a file flowkit writes, nor anything it prints.

Two distinctive keys are configured, one in the environment and one as a literal in flowkit.yaml;
llm flows then run against the local test server: runs that succeed, runs the server refuses
(401, with OpenAI's masked echo of the key), a run whose errors echo the keys in full (as some
proxies do), and a broken project file. Every command a user might run afterwards is captured,
and every byte under the working directory (but flowkit.yaml itself), the cache and the captured
output is searched for the keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from flowkit.cli.main import main
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write_jsonl

KEY_FILE = "sk-flowkit-file-4e1f0c7a9b3d2e5f"
KEY_ENV = "sk-flowkit-env-8c2d6a1f3e9b7c04"
KEYS = (KEY_FILE, KEY_ENV)


@pytest.fixture
def project(
    llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY_ENV)
    (workdir / "flowkit.yaml").write_text(
        "default_model: flowkit-test\n"
        "default_connection: local\n"
        "connections:\n"
        f"  local: {{base_url: '{llm_server.base_url}', api_key: '{KEY_FILE}', max_retries: 0}}\n"
        f"  env: {{base_url: '{llm_server.base_url}', max_retries: 0}}\n",
        "utf-8",
    )
    rows = [
        {"question": f"q{i}", "context": f"c{i}", "answer": f"a{i} [[reply: {1 + i % 5}]]"}
        for i in range(4)
    ]
    write_jsonl(workdir / "qa.jsonl", rows)
    write_jsonl(workdir / "plain.jsonl", [{"context": "c", "answer": "a"}])  # not scripted
    yield workdir
    llm_server.configure(api_key=None, hook=None)


def _echo_key(body: dict[str, Any]) -> str:
    # A proxy that quotes the credentials it was sent (those of the 'local' connection).
    raise RuntimeError(f"upstream refused the key {KEY_FILE}")


def test_keys_never_reach_run_folders_the_cache_or_the_terminal(
    project: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    captured: list[str] = []

    def flowkit(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(main, list(args))
        out = result.stdout + result.stderr
        captured.append(out)
        assert result.exit_code == code, out
        # Tracebacks are shown on purpose with --verbose; a crash is an exception, not output.
        assert result.exception is None or isinstance(result.exception, SystemExit), out
        return out

    def run(name: str, *more: str, data: str = "qa.jsonl", code: int = 0) -> str:
        return flowkit(
            *("run", "groundedness", "--data", data, "--name", name, "-q"),
            *("--cache-dir", str(cache), "--no-cache", *more),
            code=code,
        )

    llm_server.configure(api_key=KEY_FILE)
    assert "4 ok, 0 failed" in run("file-ok")
    llm_server.configure(api_key=KEY_ENV)
    assert "4 ok, 0 failed" in run("env-ok", "--connection", "env")
    assert "4 ok, 0 failed" in flowkit(
        *("run", "coherence", "--data", "qa.jsonl", "--name", "cached", "-q"),
        *("--cache-dir", str(cache), "--connection", "env"),
    )
    # The server now wants another key: every call is refused, and the refusals are recorded.
    llm_server.configure(api_key="sk-some-other-key")
    assert "0 ok, 4 failed" in run("file-denied", code=1)
    assert "0 ok, 4 failed" in run("env-denied", "--connection", "env", code=1)
    denied = read_jsonl(project / "runs" / "env-denied" / "outputs.jsonl")
    assert denied[0]["error"]["type"] == "AuthenticationError"
    assert "Incorrect API key provided: sk-f****7c04" in denied[0]["error"]["message"]
    # An error that quotes the key in full is recorded with the key masked.
    llm_server.configure(api_key=None, hook=_echo_key)
    assert "0 ok, 1 failed" in run("echoed", data="plain.jsonl", code=1)
    echoed = read_jsonl(project / "runs" / "echoed" / "outputs.jsonl")
    assert echoed[0]["error"] == {
        "node": "judge",
        "type": "InternalServerError",
        "message": "Error code: 500 - flowkit test server error: RuntimeError: upstream refused "
        "the key ****",
    }
    llm_server.configure(hook=None)

    for name in ("file-ok", "env-ok", "file-denied", "env-denied", "echoed"):
        flowkit("show", name)
        flowkit("trace", name, "--failed", "--verbose")
        flowkit("trace", name, "--row", "0", "--verbose")
        flowkit("trace", name, "--failed", "--json", "--limit", "0")
    flowkit("runs")
    flowkit("compare", "file-ok", "env-ok")
    flowkit("compare", "file-ok", "file-denied", "--json")
    flowkit("report", "echoed", "-o", "echoed.html")
    flowkit("report", "file-ok", "--compare", "env-ok", "-o", "compared.html")
    flowkit("export-otel", "echoed", "--console")  # the spans, printed
    flowkit("export-otel", "file-ok", "--console")
    assert "upstream refused the key ****" in (project / "echoed.html").read_text("utf-8")

    # A broken project file is reported without quoting its values.
    (project / "flowkit.yaml").write_text(
        f"connections:\n  local: {{api_key: '{KEY_FILE}', timeout: '{KEY_ENV}'}}\n", "utf-8"
    )
    out = run("broken", code=2)
    assert "connections.local.timeout: Input should be a valid number" in out

    written = [p for p in (*project.rglob("*"), *cache.rglob("*")) if p.is_file()]
    written = [p for p in written if p.name != "flowkit.yaml"]
    assert any(p.name == "traces.jsonl" for p in written)
    assert any(p.name.startswith("cache.sqlite") for p in written)
    for path in written:
        data = path.read_bytes()
        for key in KEYS:
            assert key.encode() not in data, f"{key} leaked into {path}"
    for out in captured:
        for key in KEYS:
            assert key not in out, f"{key} leaked into the output:\n{out}"
