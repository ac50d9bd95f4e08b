"""Hostile and broken endpoints, as a user meets them: a run through the CLI against the local
test server, its replies replaced by a hook (a spent quota, a gzip bomb, a huge body, absurd
rate-limit headers)."""

from __future__ import annotations

import functools
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from flowkit.testing.server import serve
from tests.support import REPO

ROWS = 40
pytestmark = pytest.mark.slow  # a flowkit process per test


def _project(folder: Path, base_url: str, rows: int = ROWS, **conn: object) -> Path:
    folder.mkdir(exist_ok=True)
    with open(folder / "rows.jsonl", "w") as f:
        for i in range(rows):
            f.write(json.dumps({"context": f"Fact {i}.", "answer": f"Answer {i}."}) + "\n")
    connection = {"base_url": base_url, "max_retries": 3, "backoff_base": 0.05, **conn}
    (folder / "flowkit.yaml").write_text(
        f"default_model: flowkit-test\nconnections:\n  local: {json.dumps(connection)}\n"
    )
    return folder


def _run(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "flowkit.cli",
            "run",
            "groundedness",
            *("--data", "rows.jsonl"),
            *("--name", "r", "-q"),
            *args,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path, **env},
    )


def _errors(folder: Path) -> list[str]:
    text = (folder / "runs" / "r" / "outputs.jsonl").read_text()
    return [r["error"]["message"] for r in map(json.loads, text.splitlines()) if r.get("error")]


def _quota(body: dict[str, Any]) -> web.Response:
    error = {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
    return web.json_response({"error": error}, status=429, headers={"retry-after": "1"})


def test_a_spent_quota_stops_the_run_as_a_bad_key_does(tmp_path: Path) -> None:
    with serve(hook=_quota) as srv:
        folder = _project(tmp_path / "p", srv.base_url, 100)
        done = _run(folder)
        calls = srv.stats()["requests"]
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: stopped: every call to {srv.base_url} (connection 'local') failed: quota "
        "exhausted (429 insufficient_quota): add credit or raise the limit"
    ]
    assert calls < 50  # not 100 rows times four attempts


@functools.cache
def _bomb_body() -> bytes:
    """A valid completion padded with spaces to 64 MiB, gzipped to about 64 KiB."""
    reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": "5"}}]})
    return gzip.compress(reply.encode() + b" " * (64 * 2**20), 6)


def _bomb(body: dict[str, Any]) -> web.Response:
    return web.Response(
        body=_bomb_body(),
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )


def _huge(body: dict[str, Any]) -> web.StreamResponse:
    """A valid completion padded to 8 MiB, sent in chunks without a length."""
    reply = json.dumps({"choices": [{"message": {"role": "assistant", "content": "5"}}]})
    return web.Response(body=reply.encode() + b" " * (8 * 2**20), content_type="application/json")


@pytest.mark.parametrize(
    ("hook", "cap", "shown"), [(_bomb, "1048576", "1 MiB"), (_huge, "4194304", "4 MiB")]
)
def test_a_reply_over_the_cap_is_a_failed_attempt_that_names_it(
    tmp_path: Path, hook: Any, cap: str, shown: str
) -> None:
    with serve(hook=hook) as srv:
        folder = _project(tmp_path / "p", srv.base_url, 3)
        done = _run(folder, FLOWKIT_MAX_REPLY_BYTES=cap)
        calls = srv.stats()["requests"]
    assert "ReplyTooLarge  3" in done.stderr  # failed rows are data: the run goes on
    assert (
        _errors(folder)
        == [
            f"the endpoint's reply is larger than the {shown} cap on a reply (raise it with "
            "max_reply_bytes on the connection in flowkit.yaml, or $FLOWKIT_MAX_REPLY_BYTES)"
        ]
        * 3
    )
    assert calls == 3  # not retried: the same request gets the same reply


def test_the_cap_is_a_connection_option(tmp_path: Path) -> None:
    with serve(hook=_huge) as srv:
        folder = _project(tmp_path / "p", srv.base_url, 2, max_reply_bytes=16 * 2**20)
        done = _run(folder, FLOWKIT_MAX_REPLY_BYTES="2048")
    assert done.returncode == 0, done.stderr
    assert _errors(folder) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-ratelimit-limit-tokens", "1"),
        ("x-ratelimit-limit-tokens", "1e999"),
        ("x-ratelimit-remaining-requests", "-5"),
        ("x-ratelimit-limit-requests", "nan"),
        ("x-ratelimit-reset-tokens", "99999999h"),
    ],
)
def test_absurd_rate_limit_headers_are_ignored_with_one_notice(
    tmp_path: Path, name: str, value: str
) -> None:
    def hostile(body: dict[str, Any]) -> web.Response:
        reply = {
            "choices": [{"message": {"role": "assistant", "content": "5"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
        return web.json_response(reply, headers={name: value, "x-ratelimit-remaining-tokens": "0"})

    with serve(hook=hostile) as srv:
        folder = _project(tmp_path / "p", srv.base_url, 30)
        t0 = time.monotonic()
        done = _run(folder)
    assert time.monotonic() - t0 < 60
    assert done.returncode == 0, done.stderr
    assert _errors(folder) == []
    short = name.removeprefix("x-ratelimit-")
    notice = (
        f"ignored the endpoint's x-ratelimit-{short}: {value!r} (not a plausible limit); the run "
        "paces by what it measures instead"
    )
    info = json.loads((folder / "runs" / "r" / "run.json").read_text())
    assert info["notices"].count(notice) == 1


@pytest.mark.parametrize("value", ["abc", "10", "-5"])
def test_a_bad_cap_in_the_environment_is_refused_before_the_run(tmp_path: Path, value: str) -> None:
    folder = _project(tmp_path / "p", "http://127.0.0.1:9/v1", 1)
    done = _run(folder, FLOWKIT_MAX_REPLY_BYTES=value)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: $FLOWKIT_MAX_REPLY_BYTES must be a whole number of bytes, at least 1024; it is "
        f"{value!r}"
    ]
