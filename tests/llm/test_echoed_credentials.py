"""Credentials in the base URL (sent as Basic auth) and keys in params.extra_headers never reach
run files, the terminal or an OTel export in clear, even from a server that echoes headers."""

from __future__ import annotations

import base64
from pathlib import Path

from flowkit.testing.server import LocalServer
from tests.support import start_flowkit, write, write_jsonl

SECRET_HEADER = "gw-secret-5e7a9c"
PASSWORD = "hunter2-pw-77"


def test_url_credentials_and_extra_headers_are_masked(
    llm_server: LocalServer, workdir: Path
) -> None:
    host = llm_server.base_url.split("://", 1)[1]
    (workdir / "flowkit.yaml").write_text(
        "default_model: flowkit-test\n"
        "default_connection: local\n"
        "connections:\n"
        f"  local: {{base_url: 'http://bob:{PASSWORD}@{host}', max_retries: 0}}\n",
        "utf-8",
    )
    write(
        workdir / "f.yaml",
        f"""
        name: echo
        inputs: {{q: {{type: string}}}}
        outputs: {{a: ${{ask.output}}}}
        nodes:
          - name: ask
            type: llm
            messages: [{{role: user, content: "{{{{ q }}}} [[echo: headers]]"}}]
            inputs: {{q: ${{inputs.q}}}}
            params: {{extra_headers: {{X-Gateway-Key: {SECRET_HEADER}}}}}
        """,
    )
    write_jsonl(workdir / "d.jsonl", [{"q": "hi"}])
    token = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    proc = start_flowkit(workdir, "run", "f.yaml", "--data", "d.jsonl", "--name", "r")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    texts = [out, err]
    for args in (
        ["show", "r"],
        ["trace", "r", "--row", "0", "--verbose"],
        ["trace", "r", "--row", "0", "--json"],
    ):
        proc = start_flowkit(workdir, *args)
        o, e = proc.communicate(timeout=120)
        assert proc.returncode == 0, o + e
        texts += [o, e]
    run_dir = workdir / "runs" / "r"
    files = {p.name: p.read_text("utf-8") for p in run_dir.iterdir() if p.is_file()}
    outputs = files["outputs.jsonl"]
    # The server really echoed the headers; what it echoed is recorded masked.
    assert '\\"x-gateway-key\\": \\"****\\"' in outputs.lower()
    assert "Basic ****" in outputs
    for text in [*texts, *files.values()]:
        for secret in (SECRET_HEADER, PASSWORD, token):
            assert secret not in text
