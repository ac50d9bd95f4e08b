"""A run's model calls go through its own session: its schedulers, clients and endpoint memory
are never another run's, overlapping runs in threads each keep their own memory, the memory
is kept per model and merged on save, and runs in one process that share an endpoint share its
declared rate. Real HTTP to the local test server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
import flowkit.runs.job
from flowkit.llm import memory
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint, Limits
from flowkit.llm.memory import EndpointMemory, Recalled
from flowkit.llm.session import (
    LlmSession,
    current_session,
    default_session,
    reset_default_session,
    run_session,
    using,
)
from flowkit.llm.shared import SharedEndpoints
from flowkit.testing.server import LocalServer, serve
from tests.support import REPO, write

JUDGE = REPO / "tests" / "fixtures" / "promptflow" / "judge"


def _endpoint(base_url: str, **limits: Any) -> Endpoint:
    return Endpoint(
        connection="local",
        kind="openai",
        model="flowkit-test",
        base_url=base_url,
        limits=Limits(**{"concurrency": 32, "max_retries": 0, **limits}),
    )


def _ask(endpoint: Endpoint, calls: int, model: str = "flowkit-test") -> list[Any]:
    async def body() -> list[Any]:
        asks = (
            chat(endpoint, model, [{"role": "user", "content": f"q{i}"}], {}) for i in range(calls)
        )
        return await asyncio.gather(*asks, return_exceptions=True)

    return asyncio.run(body())


def _entries(folder: Path) -> list[dict[str, Any]]:
    return list(json.loads((folder / memory.FILE).read_text())["endpoints"].values())


# -- a run's own session --------------------------------------------------------------------


def test_overlapping_runs_in_threads_each_keep_their_own_memory(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    # Capped without headers: each run's opening burst is cut, and the pace it measured kept.
    endpoint = _endpoint(llm_server.base_url, max_retries=20, backoff_max=0.2)
    llm_server.configure(rpm=600, limit_window=3.0, retry_after=0.2)
    both_open = threading.Barrier(2, timeout=20)
    first_done = threading.Event()
    seen: dict[str, Path | None] = {}

    def run(name: str) -> None:
        with run_session(tmp_path / name) as session:
            both_open.wait()  # the other run's session is open too
            if name == "second":
                first_done.wait(20)  # and this one goes on after the first has ended
            assert current_session() is session
            seen[name] = session.memory.path.parent if session.memory else None
            assert all(not isinstance(r, BaseException) for r in _ask(endpoint, 40))
        if name == "first":
            first_done.set()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("first", "second")]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        llm_server.configure(rpm=0, limit_window=60.0, retry_after=1.0)
    assert seen == {"first": tmp_path / "first", "second": tmp_path / "second"}
    for name in ("first", "second"):  # each run's findings in its own folder
        (entry,) = _entries(tmp_path / name)
        assert entry["rpm"] > 0 and entry["model"] == "flowkit-test"
    assert current_session() is not None and current_session().memory is None  # none left over


def test_runs_never_share_a_scheduler_or_a_client(llm_server: LocalServer) -> None:
    endpoint = _endpoint(llm_server.base_url)
    first, second = LlmSession(), LlmSession()
    assert first.scheduler_for(endpoint) is not second.scheduler_for(endpoint)
    assert first.scheduler_for(endpoint) is first.scheduler_for(endpoint)

    async def client_of(session: LlmSession) -> Any:
        with using(session):
            await chat(endpoint, "flowkit-test", [{"role": "user", "content": "hi"}], {})
            return await session.clients.get(endpoint)

    async def body() -> None:
        one, two = await asyncio.gather(client_of(first), client_of(second))
        assert one is not two

    asyncio.run(body())
    assert [s.stats.calls for s in first.schedulers()] == [1]
    assert first.usage.total().calls == 1


def test_calls_outside_any_run_use_the_default_session(llm_server: LocalServer) -> None:
    endpoint = _endpoint(llm_server.base_url)
    reset_default_session()

    def outside() -> None:  # a new thread: no run's session in its context
        assert current_session() is default_session()
        _ask(endpoint, 3)

    thread = threading.Thread(target=outside)
    thread.start()
    thread.join(30)
    (scheduler,) = default_session().schedulers()
    assert scheduler.stats.calls == 3
    reset_default_session()
    assert default_session().schedulers() == []


@pytest.fixture
def run_sessions(monkeypatch: pytest.MonkeyPatch) -> list[LlmSession]:
    """The sessions of the runs the test makes, kept for a look after the run."""
    kept: list[LlmSession] = []

    @contextlib.contextmanager
    def keeping(*args: Any, **kwargs: Any) -> Iterator[LlmSession]:
        with run_session(*args, **kwargs) as session:
            kept.append(session)
            yield session

    monkeypatch.setattr(flowkit.runs.job, "run_session", keeping)
    return kept


def test_every_model_call_of_a_flow_goes_through_its_runs_session(
    llm_server: LocalServer, run_sessions: list[LlmSession]
) -> None:
    # llm and prompt nodes, an embedding tool, and a python tool that asks the model itself
    # through promptflow.tools.aoai from a worker thread with its own event loop.
    reset_default_session()
    fixture = current_session()
    result = flowkit.run(JUDGE, JUDGE / "data.jsonl", use_cache=False)
    assert result.counts["failed"] == 0
    (session,) = run_sessions
    assert fixture.schedulers() == [] and default_session().schedulers() == []
    by_model: dict[str, int] = {}
    for scheduler in session.schedulers():
        by_model[scheduler.model] = by_model.get(scheduler.model, 0) + scheduler.stats.calls
    stats = llm_server.stats()
    assert by_model["flowkit-test"] == stats["chat_completions"]
    assert sum(by_model.values()) == stats["chat_completions"] + stats["embeddings"]
    # The run's loop has one, and each tool thread (its own loop) one of its own.
    assert len([s for s in session.schedulers() if s.model == "flowkit-test"]) > 1
    assert session.closed


def test_a_runs_python_nodes_and_aggregates_see_its_session(
    tmp_path: Path, run_sessions: list[LlmSession]
) -> None:
    # What a function calls ``flowkit.llm.chat`` in finds: its run's session, whether it runs
    # in a worker thread (sync) or as an aggregate after the rows.
    write(
        tmp_path / "nodes.py",
        """
        from flowkit.llm.session import current_session

        def where(x):
            return id(current_session())

        def seen(values):
            return {"sessions": len(set(values)), "same": float(values[0] == id(current_session()))}
        """,
    )
    flow = write(
        tmp_path / "flow.yaml",
        """
        name: where
        inputs: {x: {type: integer}}
        outputs: {s: ${n.output}}
        nodes:
          - {name: n, type: python, source: nodes.py, function: where, inputs: {x: ${inputs.x}}}
          - {name: m, type: aggregate, source: nodes.py, function: seen,
             inputs: {values: ${n.output}}}
        """,
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"x": i}) + "\n" for i in range(4)))
    result = flowkit.run(flow, rows, use_cache=False, cache_dir=tmp_path / "cache")
    (session,) = run_sessions
    assert result.metrics == {"where.sessions": 1, "where.same": 1.0}
    assert {r["outputs"]["s"] for r in result.rows()} == {id(session)}


# -- endpoint memory: per model, merged ------------------------------------------------------


def test_a_pace_learned_on_one_model_does_not_slow_another(tmp_path: Path) -> None:
    endpoint = _endpoint("http://127.0.0.1:9/v1", concurrency=8)
    first = LlmSession(memory=EndpointMemory(tmp_path / memory.FILE))
    first.scheduler_for(endpoint, "model-a").recall(Recalled(None, 120.0))  # as 429s taught it
    first.scheduler_for(endpoint, "model-b")  # used, learned nothing
    first.close()
    (entry,) = _entries(tmp_path)
    assert entry["model"] == "model-a" and entry["rpm"] == pytest.approx(120.0, rel=0.01)

    second = LlmSession(memory=EndpointMemory(tmp_path / memory.FILE))
    paced = second.scheduler_for(endpoint, "model-a").rate()
    assert paced == pytest.approx(120.0, rel=0.01)
    assert second.scheduler_for(endpoint, "model-b").rate() is None  # found out afresh
    assert second.memory is not None and len(second.memory.notes) == 1
    # An Azure deployment is what the request names, whatever the model label says.
    azure = Endpoint(
        connection="az",
        kind="azure",
        model="label",
        azure_endpoint="https://az.example",
        api_version="2024-06-01",
        deployment="judge",
    )
    assert second.scheduler_for(azure, "one").model == second.scheduler_for(azure, "two").model


def test_a_run_that_ends_later_keeps_what_other_runs_saved(tmp_path: Path) -> None:
    path = tmp_path / memory.FILE
    identity = ("judge", "openai", "https://gw.example/v1", "", "", "k", "{}")

    class Learned:
        url = "https://gw.example/v1"

        def __init__(self, window: int | None) -> None:
            self.window = window

        def remembered(self) -> Recalled | None:
            return None if self.window is None else Recalled(self.window, None)

        def recall(self, found: Recalled) -> None:
            pass

    early = EndpointMemory(path)  # both runs start before either has saved
    late = EndpointMemory(path)
    early.attach(identity, "model-a", Learned(12))
    early.attach(identity, "model-shared", Learned(20))
    late.attach(identity, "model-b", Learned(24))
    late.attach(identity, "model-shared", Learned(28))
    late.attach(identity, "model-a", Learned(None))  # used it, learned nothing about it
    early.save()
    late.save()
    found = {e["model"]: e["window"] for e in _entries(tmp_path)}
    assert found == {"model-a": 12, "model-b": 24, "model-shared": 28}  # the newest wins

    # Runs saving at the same moment, in threads, lose nothing either.
    memories = [EndpointMemory(path) for _ in range(8)]
    for i, each in enumerate(memories):
        each.attach(identity, f"model-{i}", Learned(10 + i))
    start = threading.Barrier(len(memories), timeout=20)

    def save(each: EndpointMemory) -> None:
        start.wait()
        each.save()

    threads = [threading.Thread(target=save, args=(m,)) for m in memories]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    found = {e["model"]: e["window"] for e in _entries(tmp_path)}
    assert {f"model-{i}": 10 + i for i in range(8)}.items() <= found.items()
    assert found["model-b"] == 24


# -- a declared rate shared by the runs of a process ------------------------------------------

RPM = 600  # 10 requests a second, a burst of 10: the runs below take about 3 s


def _rejected_by_two_runs(
    server: LocalServer, shared: SharedEndpoints | None, calls: int
) -> tuple[int, int]:
    """(429s, requests) at the server while two runs in threads, each in its own session,
    send ``calls`` chats at once to one endpoint declared at ``RPM``."""
    endpoint = _endpoint(server.base_url, rpm=RPM, concurrency=64)
    server.reset()
    start = threading.Barrier(2, timeout=20)

    def run() -> None:
        with run_session(None, shared=shared):
            start.wait()
            _ask(endpoint, calls)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    stats = server.stats()
    return stats["by_status"].get("429", 0), stats["chat_completions"]


def test_concurrent_runs_share_a_declared_rate() -> None:
    # Each run alone keeps under the limit, but two that keep their budgets to themselves send
    # twice the declared rate between them...
    with serve(rpm=RPM, limit_window=60.0, retry_after=0.5) as server:
        apart, _ = _rejected_by_two_runs(server, None, 20)
    assert apart > 0
    # ...while two that share the endpoint's budget are rejected no more than one run.
    with serve(rpm=RPM, limit_window=60.0, retry_after=0.5) as server:
        together, requests = _rejected_by_two_runs(server, SharedEndpoints(), 20)
    assert together == 0 and requests == 40


def test_two_flowkit_runs_in_threads_stay_under_a_declared_rpm(tmp_path: Path) -> None:
    with serve(rpm=RPM, limit_window=60.0, retry_after=0.5) as server:
        (tmp_path / "flowkit.yaml").write_text(
            "default_model: flowkit-test\nconnections:\n  local: "
            + json.dumps({"base_url": server.base_url, "rpm": RPM, "max_retries": 3})
            + "\n"
        )
        rows = tmp_path / "rows.jsonl"
        rows.write_text(
            "".join(json.dumps({"context": f"c{i}", "answer": f"a{i}"}) + "\n" for i in range(20))
        )
        settings = flowkit.llm.load_settings(tmp_path, env={})
        results: list[Any] = []

        def run(name: str) -> None:
            results.append(
                flowkit.run(
                    "groundedness",
                    rows,
                    settings=settings,
                    use_cache=False,
                    concurrency=32,
                    cache_dir=tmp_path / f"cache-{name}",
                    output=tmp_path / name,
                )
            )

        threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert [r.counts["succeeded"] for r in results] == [20, 20]
        stats = server.stats()
        assert stats["by_status"].get("429", 0) == 0 and stats["chat_completions"] == 40


def test_a_save_within_the_same_millisecond_still_wins(tmp_path: Path) -> None:
    # Entries are stored to the millisecond: an earlier save rounded up must not look later
    # than a save made a fraction of a millisecond after it.
    path = tmp_path / memory.FILE
    identity = ("judge", "openai", "https://gw.example/v1", "", "", "k", "{}")

    class Learned:
        url = "https://gw.example/v1"

        def __init__(self, window: int) -> None:
            self.window = window

        def remembered(self) -> Recalled | None:
            return Recalled(self.window, None)

        def recall(self, found: Recalled) -> None:
            pass

    early = EndpointMemory(path, clock=lambda: 1000.0006)
    late = EndpointMemory(path, clock=lambda: 1000.0008)
    early.attach(identity, "model-a", Learned(12))
    late.attach(identity, "model-a", Learned(30))
    early.save()
    late.save()
    assert {e["model"]: e["window"] for e in _entries(tmp_path)} == {"model-a": 30}
