"""Rate limits, early stop and --concurrency over real HTTP against the local test server.

Budgets are scaled down: the server counts ``rpm`` over a 3-second window and the scheduler is
told the same window, so a "300 rpm" endpoint allows 100 requests per second and a test of a
few seconds sees many refill cycles.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import flowkit
from flowkit.llm import Endpoint, Limits, load_settings
from flowkit.llm.client import chat
from flowkit.llm.scheduler import Scheduler
from flowkit.testing.server import ServerConfig, serve, serve_subprocess

WINDOW = 3.0
RPM = 300  # per WINDOW: 100 requests per second


def _drive(base_url: str, calls: int, **limits: object) -> tuple[float, Scheduler]:
    ep = Endpoint(
        connection="local",
        kind="openai",
        model="m",
        base_url=base_url,
        limits=Limits(concurrency=32, max_retries=50, **limits),  # type: ignore[arg-type]
    )
    sched = Scheduler(ep.limits, name="local", url=ep.url, window=WINDOW)

    async def body() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                chat(ep, "m", [{"role": "user", "content": f"q{i}"}], {}, scheduler=sched)
                for i in range(calls)
            )
        )
        return time.perf_counter() - t0

    return asyncio.run(body()), sched


@pytest.mark.slow
@pytest.mark.parametrize("headers", [True, False], ids=["with-headers", "without-headers"])
def test_rate_converges_under_the_limit(headers: bool) -> None:
    # In a child process: a server sharing the client's GIL would bunch its replies.
    config = ServerConfig(rpm=RPM, limit_window=WINDOW, latency=0.02, rate_headers=headers)
    with serve_subprocess(config) as srv:
        elapsed, sched = _drive(srv.base_url, 800)
        stats = srv.stats()
    ok, rejected = stats["by_status"]["200"], stats["by_status"].get("429", 0)
    # Every call got its answer; on a loaded machine a reply the client stopped waiting for is
    # answered again, so the server may count a few more.
    assert ok >= 800
    limit = RPM / WINDOW
    # Only the bound load cannot break: never above the cap (plus the first second's burst).
    # How close to it the client gets is the benchmark's to measure (rate_limited.py).
    assert ok / elapsed <= limit * 1.1
    # Without headers the first second finds the limit by hitting it.
    assert rejected / stats["requests"] < (0.15 if headers else 0.3), stats["by_status"]
    assert sched.rate() is not None and sched.rate() <= RPM * 1.3  # learned, under the cap


def test_a_token_budget_is_learned_from_headers() -> None:
    with serve(tpm=6000, limit_window=WINDOW, latency=0.01, rate_headers=True) as srv:
        _, sched = _drive(srv.base_url, 150)
        stats = srv.stats()
    assert stats["by_status"]["200"] == 150
    assert sched.token_rate() == pytest.approx(6000 * 0.97)
    assert stats["by_status"].get("429", 0) / stats["requests"] < 0.15


def _project(folder: Path, base_url: str, rows: int, **conn: object) -> Path:
    folder.mkdir(exist_ok=True)
    with open(folder / "rows.jsonl", "w") as f:
        for i in range(rows):
            f.write(json.dumps({"context": f"Fact {i}.", "answer": f"Answer {i}."}) + "\n")
    connection = {"base_url": base_url, "max_retries": 3, "backoff_base": 0.05, **conn}
    (folder / "flowkit.yaml").write_text(
        f"default_model: flowkit-test\nconnections:\n  local: {json.dumps(connection)}\n"
    )
    return folder


def _cli(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flowkit.cli", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed: connections are refused


def test_a_refused_connection_stops_the_run_with_one_error_and_resume_finishes_it(
    tmp_path: Path,
) -> None:
    port = _free_port()
    folder = _project(tmp_path / "p", f"http://127.0.0.1:{port}/v1", 200)
    done = _cli(folder, "run", "groundedness", "--data", "rows.jsonl", "--name", "r", "-q")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: stopped: every call to http://127.0.0.1:{port}/v1 (connection 'local') "
        "failed: connection refused (is the server running?)"
    ]
    assert "hint: finished rows are kept" in done.stderr
    info = json.loads((folder / "runs" / "r" / "run.json").read_text())
    assert info["status"] == "failed"
    with serve(port=port) as srv:  # the endpoint is fixed
        resumed = _cli(folder, "run", "--resume", "r", "-q")
        assert resumed.returncode == 0, resumed.stderr
        assert srv.stats()["chat_completions"] >= 1
    text = (folder / "runs" / "r" / "outputs.jsonl").read_text()
    final = {r["line"]: r["status"] for r in map(json.loads, text.splitlines())}
    assert len(final) == 200 and set(final.values()) == {"ok"}


def test_a_wrong_key_stops_the_run_early(tmp_path: Path) -> None:
    with serve(api_key="right-key-123456") as srv:
        folder = _project(tmp_path / "p", srv.base_url, 300, api_key="wrong-key-abcdef")
        done = _cli(folder, "run", "groundedness", "--data", "rows.jsonl", "-q")
        calls = srv.stats()["requests"]
    assert done.returncode == 1
    assert (
        f"error: stopped: every call to {srv.base_url} (connection 'local') failed: "
        "authentication failed (401)" in done.stderr
    )
    assert "wrong-key-abcdef" not in done.stderr
    assert calls < 100  # it did not fail all 300 rows one by one


def _run_at_40(project: Path) -> None:
    """``groundedness`` over the project's rows at --concurrency 40, cache off (a run's
    schedulers are its own)."""
    flowkit.run(
        "groundedness",
        project / "rows.jsonl",
        settings=load_settings(project, env={}),
        use_cache=False,
        concurrency=40,
        output=project / "run",
    )


def test_run_concurrency_is_the_endpoints_limit_unless_the_connection_sets_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with serve(latency=0.05) as srv:
        _run_at_40(_project(tmp_path / "unset", srv.base_url, 120))
        assert srv.stats()["max_in_flight"] > 16  # the old default no longer caps the run
        srv.reset()
        pinned = _project(tmp_path / "pinned", srv.base_url, 60, concurrency=8)
        with caplog.at_level(logging.WARNING, logger="flowkit.llm"):
            _run_at_40(pinned)
        assert srv.stats()["max_in_flight"] <= 8
    assert [r.getMessage() for r in caplog.records] == [
        "note: connection 'local' allows 8 requests in flight (its concurrency setting); the "
        "run's --concurrency is 40, so at most 8 of its rows wait on it at once"
    ]


def test_dns_and_tls_failures_stop_the_run_naming_which_and_where(tmp_path: Path) -> None:
    # `.invalid` never resolves (RFC 6761); https to a plain-HTTP server fails its handshake.
    dns_url = "http://no-such-host.invalid/v1"
    dns = _cli(
        _project(tmp_path / "dns", dns_url, 20), "run", "groundedness", "--data", "rows.jsonl"
    )
    with serve() as srv:
        tls_url = srv.base_url.replace("http://", "https://")
        tls = _cli(
            _project(tmp_path / "tls", tls_url, 20), "run", "groundedness", "--data", "rows.jsonl"
        )
    assert dns.returncode == tls.returncode == 1
    assert [line for line in dns.stderr.splitlines() if line.startswith("error:")] == [
        f"error: stopped: every call to {dns_url} (connection 'local') failed: "
        "DNS lookup failed (unknown host)"
    ]
    errors = [line for line in tls.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert errors[0].startswith(
        f"error: stopped: every call to {tls_url} (connection 'local') failed: TLS handshake failed"
    )


# Real time against a rate cap: the pace is learned from how fast replies come back, which a
# test running beside others on the same cores skews; the slow stage runs it alone (-n0).
@pytest.mark.slow
def test_an_unknown_rpm_cap_is_found_from_one_opening_burst() -> None:
    # No headers: the run opens with all 32 in flight, which finds the server's 5-request
    # budget with 27 of them; that one burst sets a measured pace, so the rejections stop there.
    config = ServerConfig(rpm=RPM, limit_window=WINDOW, latency=0.02)
    with serve_subprocess(config) as srv:
        _, sched = _drive(srv.base_url, 120)
        stats = srv.stats()
    assert stats["by_status"]["200"] == 120
    assert sched.stats.peak_in_flight == 32
    assert stats["by_status"].get("429", 0) <= 32, stats["by_status"]
    assert sched.rate() is not None and RPM * 0.5 <= sched.rate() <= RPM * 1.2


def test_a_fast_endpoint_without_limits_reaches_full_concurrency_in_a_fraction_of_a_second() -> (
    None
):
    with serve_subprocess(ServerConfig(latency=0.05)) as srv:
        ep = Endpoint(
            connection="local",
            kind="openai",
            model="m",
            base_url=srv.base_url,
            limits=Limits(concurrency=32),
        )
        sched = Scheduler(ep.limits, name="local", url=ep.url)
        opened: list[int] = []  # in flight as each request leaves, in order

        async def body() -> float:
            t0 = time.perf_counter()

            async def one(i: int) -> None:
                await chat(ep, "m", [{"role": "user", "content": f"q{i}"}], {}, scheduler=sched)

            tasks = [asyncio.create_task(one(i)) for i in range(400)]
            while sched.stats.peak_in_flight < 32:
                opened.append(sched.in_flight)
                await asyncio.sleep(0.005)
            reached = time.perf_counter() - t0
            await asyncio.gather(*tasks)
            return reached

        reached = asyncio.run(body())
        peak = srv.stats()["max_in_flight"]
    assert reached < 1.0  # five round trips of 50 ms, plus the client's start
    assert max(opened) < 32 and opened[0] <= 1  # it ramped up rather than opening at 32
    assert peak == 32
