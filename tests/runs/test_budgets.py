"""One budget per endpoint across a run's workers (flowkit.llm.leases, flowkit.llm.handed): what
the test server sees of a run on several workers is what it sees of a local run.

Each test serves its own endpoint (a latency, a rate limit) and names it in a flowkit.yaml, so
the in-flight maximum and the rejections the server counts are this run's alone.
"""

from __future__ import annotations

import importlib.util
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.errors import EndpointError, UsageError
from flowkit.testing.server import LocalServer, serve
from tests.pfcompat import test_tool_threads as tool_threads
from tests.runs.test_backends import JUDGE
from tests.support import read_json, read_jsonl, write

CONCURRENCY = 8


def _project(workdir: Path, server: LocalServer, **connection: Any) -> Path:
    """flowkit.yaml with one connection `c` to ``server``, and the judge flow; its path."""
    conn = {"base_url": server.base_url, "api_key": "k", **connection}
    write(workdir / "flowkit.yaml", f"default_model: m1\nconnections:\n  c: {json.dumps(conn)}\n")
    return write(workdir / "judge.yaml", JUDGE)


@pytest.fixture
def slow_endpoint(workdir: Path) -> Iterator[LocalServer]:
    """An endpoint answering in 0.1 s, without slow start: a run keeps as many requests in
    flight at it as its --concurrency allows."""
    with serve(latency=0.1) as server:
        _project(workdir, server, slow_start=False)
        yield server


def _in_flight(server: LocalServer, rows: int, **options: Any) -> int:
    result = flowkit.run(
        "judge.yaml",
        [{"q": f"q{i}"} for i in range(rows)],
        use_cache=False,
        workers=2,
        concurrency=CONCURRENCY,
        **options,
    )
    assert result.counts["succeeded"] == rows
    return int(server.stats()["max_in_flight"])


def test_threading_workers_hold_the_runs_concurrency_at_the_endpoint(
    slow_endpoint: LocalServer,
) -> None:
    # Two workers, each running 8 rows at a time: 8 requests in flight at the endpoint, not 16.
    assert _in_flight(slow_endpoint, 64, backend="threading", chunk_size=16) == CONCURRENCY


@pytest.mark.slow
def test_loky_workers_hold_the_runs_concurrency_at_the_endpoint(
    slow_endpoint: LocalServer,
) -> None:
    assert _in_flight(slow_endpoint, 64, backend="loky", chunk_size=16) == CONCURRENCY


@pytest.mark.slow
def test_loky_workers_learn_one_rate_limit_and_keep_to_it(workdir: Path) -> None:
    """An endpoint limited to 600 requests a minute, which says so only in its rate-limit
    headers: two workers together keep to the limit the driver learned, none is rejected."""
    with serve(rpm=600, limit_window=60.0, rate_headers=True, retry_after=1.0) as server:
        # As OpenAI's and Azure's hosts are treated (one request first, whose headers pace the
        # rest): a loopback address cannot say it is one of them.
        _project(workdir, server, slow_start=True)
        rows = [{"q": f"q{i}"} for i in range(60)]
        result = flowkit.run(
            "judge.yaml", rows, use_cache=False, backend="loky", workers=2, chunk_size=10
        )
        stats = server.stats()
    assert result.counts["succeeded"] == 60
    assert stats["by_status"] == {"200": 60}


@pytest.mark.slow
def test_dask_workers_hold_the_runs_concurrency_at_the_endpoint(
    slow_endpoint: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    distributed = pytest.importorskip("distributed")
    # A cluster joined by address is served on every interface: this one is on loopback.
    monkeypatch.setenv("FLOWKIT_LEASE_BIND", "127.0.0.1")
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
    ) as cluster:
        found = _in_flight(
            slow_endpoint, 64, backend="dask", scheduler=cluster.scheduler_address, chunk_size=16
        )
    assert found == CONCURRENCY


@pytest.mark.cluster
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_ray_workers_hold_the_runs_concurrency_at_the_endpoint(
    slow_endpoint: LocalServer,
) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        found = _in_flight(slow_endpoint, 64, backend="ray", chunk_size=16)
    finally:
        ray.shutdown()
    assert found == CONCURRENCY


def test_run_json_records_each_endpoint_the_run_used(slow_endpoint: LocalServer) -> None:
    result = flowkit.run(
        "judge.yaml", [{"q": "a"}, {"q": "b"}], use_cache=False, backend="threading", workers=2
    )
    assert read_json(result.run_dir / "run.json")["endpoints"] == [
        {"connection": "c", "url": slow_endpoint.base_url, "model": "m1"}
    ]
    traces = read_jsonl(result.run_dir / "traces.jsonl")
    asked = [t["llm"]["request"]["endpoint"] for t in traces if t.get("llm")]
    assert asked == [slow_endpoint.base_url] * 2
    local = flowkit.run("judge.yaml", [{"q": "a"}], use_cache=False, model="m2")
    assert read_json(local.run_dir / "run.json")["endpoints"] == [
        {"connection": "c", "url": slow_endpoint.base_url, "model": "m2"}
    ]


# -- a worker's own side: run_chunk called as a worker process calls it -----------------------


def _worker_job(workdir: Path, url: str, **connection: Any) -> Any:
    """A worker's job for the judge flow, whose driver resolved connection `openai` to ``url``
    (its ticket points at a port where nothing listens)."""
    from flowkit.flow.loader import load_flow
    from flowkit.llm.config import Settings
    from flowkit.llm.endpoint import Connection
    from flowkit.llm.leases import Ticket
    from flowkit.runs.backends import WorkerJob
    from flowkit.runs.bundle import pack
    from flowkit.runs.config import RunConfig

    flow = load_flow(write(workdir / "judge.yaml", JUDGE))
    driver = Settings(
        default_model="m1",
        connections={"openai": Connection(base_url=url, **connection)},
        project_dir=str(workdir),
    )
    with socket.socket() as sock:  # a free port, closed again: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ticket = Ticket(
        f"ws://127.0.0.1:{port}/lease", "t", driver.model_dump(mode="json", exclude_unset=True)
    )
    return WorkerJob(pack(flow), RunConfig(), "r", flow.content_hash, lease=ticket), port


def _run_chunk(job: Any) -> Any:
    from flowkit.runs.backends import run_chunk

    return run_chunk(job, [(0, {"q": "x"}, None)])


def test_a_worker_refuses_to_run_against_another_endpoint_than_the_drivers(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://elsewhere.test:8000/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker")
    job, _ = _worker_job(workdir, "http://driver.test:9000/v1")
    with pytest.raises(UsageError) as caught:
        _run_chunk(job)
    assert caught.value.message == (
        f"worker on {socket.gethostname()} resolves connection 'openai' to "
        "http://elsewhere.test:8000/v1 (openai), but the driver's run uses "
        "http://driver.test:9000/v1 (openai); refusing to run against another endpoint"
    )


def test_a_worker_without_the_key_says_so(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The driver's key never travels: a worker without one in its environment cannot run.
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWKIT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    job, _ = _worker_job(workdir, "https://api.openai.com/v1")
    with pytest.raises(UsageError) as caught:
        _run_chunk(job)
    assert caught.value.message == (
        f"worker on {socket.gethostname()}: flow 'judge' node 'judge' uses connection 'openai', "
        "which needs an API key, but $OPENAI_API_KEY is not set (or set api_key_env in "
        "flowkit.yaml)"
    )


def test_a_worker_that_cannot_reach_the_drivers_budgets_fails_its_chunk(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Never a silent fallback to budgets of its own.
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker")
    job, port = _worker_job(workdir, "http://driver.test:9000/v1")
    with pytest.raises(EndpointError) as caught:
        _run_chunk(job)
    assert caught.value.message.startswith(
        f"worker on {socket.gethostname()} cannot reach the run's endpoint budgets at "
        f"127.0.0.1:{port} (the driver's lease service): "
    )
    assert caught.value.hint == (
        "workers must reach the driver at that address: set $FLOWKIT_LEASE_ADDRESS to where "
        "they reach it (and $FLOWKIT_LEASE_BIND to where the driver listens)"
    )


def test_a_driver_that_cannot_listen_where_it_is_told_says_so(
    slow_endpoint: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flowkit.errors import FlowkitError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("FLOWKIT_LEASE_BIND", f"127.0.0.1:{port}")
        with pytest.raises(FlowkitError) as caught:
            flowkit.run("judge.yaml", [{"q": "a"}], use_cache=False, backend="threading")
    assert caught.value.message.startswith(
        f"cannot serve the run's endpoint budgets on 127.0.0.1:{port}: "
    )
    assert caught.value.hint == (
        "set $FLOWKIT_LEASE_BIND to an address and port this host can listen on"
    )


def test_an_endpoint_that_fails_every_call_stops_the_run_once_for_all_workers(
    workdir: Path,
) -> None:
    """A wrong key: the driver's scheduler counts the failures of every worker's calls, so the
    endpoint is marked down after 5 of them in all (not 5 per worker), and the workers' rows
    stop with the driver's error."""
    with serve(api_key="right") as server:
        _project(workdir, server, api_key="wrong")
        rows = [{"q": f"q{i}"} for i in range(40)]
        with pytest.raises(EndpointError) as caught:
            flowkit.run(
                "judge.yaml",
                rows,
                use_cache=False,
                backend="threading",
                workers=2,
                concurrency=1,
                chunk_size=10,
            )
        stats = server.stats()
    assert caught.value.message == (
        f"stopped: every call to {server.base_url} (connection 'c') failed: "
        "authentication failed (401)"
    )
    assert stats["by_status"] == {"401": 5}


@pytest.mark.slow
def test_a_tools_model_call_from_a_thread_of_its_own_draws_on_the_drivers_budget(
    llm_server: LocalServer, workdir: Path
) -> None:
    """A Prompt Flow tool calls chat from a thread with an event loop of its own, not the
    chunk's: its calls go through the driver's scheduler all the same. (On loky: threading
    workers are several runs in one process, where such a thread's run cannot be told.)"""
    write(workdir / "pooled" / "flow.dag.yaml", tool_threads.DAG)
    write(workdir / "pooled" / "pooled.py", tool_threads.TOOL)
    llm_server.configure(hook=lambda body: "model=" + body["model"])
    try:
        result = flowkit.run(
            workdir / "pooled",
            [{"question": f"question {i}?"} for i in range(8)],
            model="judge-b",
            use_cache=False,
            backend="loky",
            workers=2,
            chunk_size=4,
        )
    finally:
        llm_server.configure(hook=None)
    assert [r["outputs"]["said"] for r in result.rows()] == ["model=judge-b"] * 8
    endpoints = read_json(result.run_dir / "run.json")["endpoints"]
    assert [(e["url"], e["model"]) for e in endpoints] == [(llm_server.base_url, "judge-b")]


def test_stopping_the_budgets_does_not_wait_for_a_worker_still_connected() -> None:
    """A worker whose chunk still runs (a Dask task cannot be stopped) keeps its websocket
    open: a run that stopped on an error (another worker's refusal) waited 30 s for it, then
    raised TimeoutError in place of that error."""
    import asyncio
    import threading
    import time

    import aiohttp

    from flowkit.llm.leaseserver import serve_leases
    from flowkit.llm.session import current_session

    connected = threading.Event()
    release = threading.Event()

    async def hold(url: str, token: str) -> None:
        async with aiohttp.ClientSession() as http:
            headers = {"Authorization": f"Bearer {token}"}
            async with http.ws_connect(url, headers=headers) as ws:
                connected.set()
                while not release.is_set() and not ws.closed:
                    await asyncio.sleep(0.05)

    start = 0.0
    with (
        pytest.raises(KeyError, match="the run's own error"),
        serve_leases(current_session(), None) as ticket,
    ):
        worker = threading.Thread(target=asyncio.run, args=(hold(ticket.url, ticket.token),))
        worker.start()
        assert connected.wait(10)
        start = time.monotonic()
        raise KeyError("the run's own error")
    took = time.monotonic() - start
    release.set()
    worker.join(10)
    assert took < 8
