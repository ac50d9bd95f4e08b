"""Redirects from a hostile endpoint, as a user meets them through the CLI: httpx reads a
redirect's body whole before following it, and sends every header but ``Authorization`` to
wherever the redirect points (an Azure ``api-key``, a gateway key in ``extra_headers``)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from flowkit.testing.server import serve
from tests.llm.test_hostile_endpoints import _bomb_body, _errors, _project, _run
from tests.support import REPO

pytestmark = pytest.mark.slow  # a flowkit process per test


def test_a_bomb_in_a_redirect_is_stopped_at_the_cap(tmp_path: Path) -> None:
    def hostile(body: dict[str, Any]) -> web.Response:
        headers = {"Content-Encoding": "gzip", "Location": "/v1/chat/completions"}
        return web.Response(status=307, body=_bomb_body(), headers=headers)

    with serve(hook=hostile) as srv:
        folder = _project(tmp_path / "p", srv.base_url, 2)
        done = _run(folder, FLOWKIT_MAX_REPLY_BYTES="1048576")
        calls = srv.stats()["requests"]
    # It was inflated whole, 64 MiB a hop, for 20 hops, then failed as too many redirects.
    assert (
        _errors(folder)
        == [
            "the endpoint's reply is larger than the 1 MiB cap on a reply (raise it with "
            "max_reply_bytes on the connection in flowkit.yaml, or $FLOWKIT_MAX_REPLY_BYTES)"
        ]
        * 2
    ), done.stderr
    assert calls <= 4  # the direct try and the SDK's one, per row; no hops


def test_a_redirect_to_another_host_is_refused_with_its_credentials(tmp_path: Path) -> None:
    with serve() as elsewhere:

        def hostile(body: dict[str, Any]) -> web.Response:
            target = f"{elsewhere.base_url}/chat/completions?token=abc"
            return web.Response(status=307, headers={"Location": target})

        with serve(hook=hostile) as srv:
            folder = _project(tmp_path / "p", srv.base_url, 2)
            (folder / "f.yaml").write_text(
                "name: ask\ninputs: {context: {type: string}}\noutputs: {a: ${ask.output}}\n"
                "nodes:\n  - name: ask\n    type: llm\n"
                "    messages: [{role: user, content: '{{ c }}'}]\n"
                "    inputs: {c: ${inputs.context}}\n"
                "    params: {extra_headers: {X-Gateway-Key: gw-secret-5e7a9c}}\n"
            )
            done = _run_flow(folder, "f.yaml")
        leaked = elsewhere.stats()["requests"]
    assert leaked == 0  # the gateway key went to the other host
    host = elsewhere.base_url.split("://", 1)[1].split("/", 1)[0]
    assert set(_errors(folder)) == {
        f"the endpoint redirected the request to another host (http://{host}); flowkit does "
        "not send a request and its credentials where the connection does not name: set the "
        "connection's base_url to that host if it is the right one"
    }, done.stderr
    assert "token=abc" not in done.stderr


def test_a_redirect_on_the_same_host_is_followed(tmp_path: Path) -> None:
    calls = itertools.count()

    def sometimes(body: dict[str, Any]) -> web.Response | None:
        if next(calls) % 2 == 0:
            return web.Response(status=307, text="moved", headers={"Location": "completions"})
        return None  # the server's own reply

    with serve(hook=sometimes) as srv:
        folder = _project(tmp_path / "p", srv.base_url, 3)
        done = _run(folder)
    assert done.returncode == 0, done.stderr
    assert _errors(folder) == []
    assert json.loads((folder / "runs" / "r" / "run.json").read_text())["status"] == "completed"


def _run_flow(folder: Path, flow: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "flowkit.cli",
            "run",
            flow,
            "--data",
            "rows.jsonl",
            "--no-cache",
            *("--name", "r", "-q"),
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
