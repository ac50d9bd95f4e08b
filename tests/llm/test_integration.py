"""The real openai client over real HTTP against the local test server (never a mock)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from flowkit.llm import (
    Endpoint,
    Limits,
    UsageTracker,
    chat,
    clients_created,
    embed,
    get_client,
    load_settings,
    scheduler_for,
)
from flowkit.llm.session import LlmSession
from flowkit.testing.server import LocalServer, ServerConfig, serve

FAST = Limits(concurrency=16, timeout=5, max_retries=6, backoff_base=0.01, backoff_max=0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with serve(ServerConfig(retry_after=0.2)) as srv:
        yield srv


@pytest.fixture(autouse=True)
def fresh(server: LocalServer, llm_session: LlmSession) -> None:
    server.configure(rate_429=0.0, rate_500=0.0, rate_timeout=0.0, retry_after=0.2, api_key=None)
    server.reset()


def endpoint(server: LocalServer, limits: Limits = FAST, **kw: Any) -> Endpoint:
    fields: dict[str, Any] = {"connection": "local", "kind": "openai", "model": "flowkit-test"}
    fields.update(base_url=server.base_url, limits=limits, **kw)
    return Endpoint(**fields)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_plain_chat_through_flowkit_yaml(server: LocalServer, tmp_path: Path) -> None:
    (tmp_path / "flowkit.yaml").write_text(
        "default_model: flowkit-test\n"
        "connections:\n"
        f"  local: {{base_url: '{server.base_url}', api_key_env: LOCAL_KEY, backoff_base: 0.01}}\n"
    )
    ep = load_settings(tmp_path, env={"LOCAL_KEY": "sk-local"}).check("f", "n", None, None)
    tracker = UsageTracker()

    async def body() -> None:
        result = await chat(ep, ep.model, user("Say it. [[reply: hello there]]"), {"seed": 1})
        assert result.text == "hello there"
        assert result.texts == ["hello there"]
        assert result.finish_reason == "stop"
        assert result.model == "flowkit-test"
        assert result.attempts == 1
        assert result.refusal is None
        assert result.top_logprobs is None
        assert (
            result.usage["total_tokens"]
            == (result.usage["prompt_tokens"] + result.usage["completion_tokens"])
            > 0
        )
        tracker.record("n", result.model, result.usage)

    asyncio.run(body())
    assert tracker.total().calls == 1
    assert tracker.total_cost() is None  # flowkit-test has no price: unknown, not zero


def test_n_choices_max_tokens_and_logprobs(server: LocalServer) -> None:
    ep = endpoint(server)
    params = {"n": 3, "logprobs": True, "top_logprobs": 4, "temperature": 0, "top_k": 5}

    async def body() -> None:
        result = await chat(ep, "flowkit-test", user("Rate this answer."), params)
        assert len(result.texts) == 3
        assert result.text == result.texts[0]
        assert all(t.startswith("Score: ") for t in result.texts)
        assert result.top_logprobs is not None and len(result.top_logprobs) == 4
        assert set(result.top_logprobs[0]) == {"token", "logprob"}
        cut = await chat(
            ep, "flowkit-test", user("[[reply: one two three four]]"), {"max_tokens": 2}
        )
        assert (cut.text, cut.finish_reason) == ("one two", "length")

    asyncio.run(body())


def test_embeddings_are_batched_and_ordered(server: LocalServer) -> None:
    ep = endpoint(server)
    texts = [f"text number {i} about topic {i % 3}" for i in range(10)]

    async def body() -> None:
        batched = await embed(ep, "text-embedding-3-small", texts, batch_size=3)
        assert server.stats()["by_endpoint"]["embeddings"] == 4
        single = await embed(ep, "text-embedding-3-small", texts[::-1], batch_size=256)
        assert len(batched.vectors) == 10
        assert batched.vectors == single.vectors[::-1]
        assert batched.usage["total_tokens"] == single.usage["total_tokens"] > 0

    asyncio.run(body())


def test_429_with_retry_after_then_success(server: LocalServer) -> None:
    ep = endpoint(server)

    async def body() -> float:
        t0 = time.perf_counter()
        result = await chat(ep, "flowkit-test", user("[[fault-once: 429]] again"), {})
        assert result.attempts == 2
        assert result.text.startswith("Score: ")
        return time.perf_counter() - t0

    elapsed = asyncio.run(body())
    assert elapsed >= 0.19  # the server said Retry-After: 0.2
    stats = scheduler_for(ep).snapshot()
    assert (stats["rate_limited"], stats["retries"], stats["requests"]) == (1, 1, 2)
    assert server.stats()["by_status"] == {"429": 1, "200": 1}


def test_timeout_then_retry(server: LocalServer) -> None:
    ep = endpoint(server)

    async def body() -> float:
        t0 = time.perf_counter()
        result = await chat(
            ep, "flowkit-test", user("[[fault-once: timeout]] slow"), {}, timeout=0.3
        )
        assert result.attempts == 2
        return time.perf_counter() - t0

    assert asyncio.run(body()) < 3.0
    assert scheduler_for(ep).stats.timeouts == 1


def test_truncated_response_is_retried(server: LocalServer) -> None:
    ep = endpoint(server)

    async def body() -> None:
        result = await chat(ep, "flowkit-test", user("[[fault-once: malformed]] [[reply: ok]]"), {})
        assert (result.text, result.attempts) == ("ok", 2)

    asyncio.run(body())
    assert scheduler_for(ep).stats.malformed == 1


def test_non_retryable_error_is_raised_at_once(server: LocalServer) -> None:
    server.configure(api_key="right-key")
    ep = endpoint(server, api_key="wrong-key")

    async def body() -> None:
        await chat(ep, "flowkit-test", user("hi"), {})

    with pytest.raises(openai.AuthenticationError) as caught:
        asyncio.run(body())
    assert "wrong-key" not in str(caught.value)
    assert server.stats()["requests"] == 1


def test_faulty_server_gives_the_same_scores_as_a_clean_one(server: LocalServer) -> None:
    ep = endpoint(server, limits=FAST.model_copy(update={"concurrency": 32}))
    prompts = [user(f"Question {i}: how good is answer {i * 7}?") for i in range(100)]

    async def run_all() -> list[Any]:
        calls = (chat(ep, "flowkit-test", p, {"temperature": 0}) for p in prompts)
        return await asyncio.gather(*calls, return_exceptions=True)

    clean = asyncio.run(run_all())
    assert all(not isinstance(r, BaseException) for r in clean)
    server.reset()
    server.configure(rate_429=0.15, rate_500=0.05, retry_after=0.01)
    faulty = asyncio.run(run_all())

    failures = [r for r in faulty if isinstance(r, BaseException)]
    # Seven straight faults at 20 % is ~1e-5 per call: a failure would be the last error.
    assert all(isinstance(f, openai.APIStatusError) for f in failures)
    assert all(f.status_code in (429, 500) for f in failures)  # type: ignore[attr-defined]
    assert len(failures) <= 1
    for before, after in zip(clean, faulty, strict=True):
        if not isinstance(after, BaseException):
            assert after.text == before.text
    server_stats = server.stats()
    sched = scheduler_for(ep).snapshot()
    assert server_stats["by_status"].get("429", 0) == sched["rate_limited"] > 0
    assert server_stats["by_status"].get("500", 0) == sched["server_errors"] > 0
    assert sum(r.attempts for r in faulty if not isinstance(r, BaseException)) > 100
    assert server_stats["max_in_flight"] <= 32


def test_one_client_per_endpoint_and_loop(server: LocalServer) -> None:
    ep = endpoint(server)
    seen: list[openai.AsyncOpenAI] = []

    async def body() -> None:
        before = clients_created()
        first = await get_client(ep)
        await asyncio.gather(*(chat(ep, "flowkit-test", user(f"q{i}"), {}) for i in range(5)))
        await embed(ep, "text-embedding-3-small", ["a", "b"])
        assert await get_client(ep) is first
        assert clients_created() == before + 1
        seen.append(first)

    asyncio.run(body())
    asyncio.run(body())  # a new event loop gets its own client...
    assert seen[0] is not seen[1]
    assert seen[0].is_closed()  # ...and the old loop's client was closed when its loop ended
    assert seen[1].is_closed()


def test_an_endpoint_with_many_requests_in_flight_sends_them_all_through_one_client(
    server: LocalServer,
) -> None:
    wide = endpoint(server, FAST.model_copy(update={"concurrency": 64}))
    server.configure(latency=0.1)  # long enough for many requests to be in flight at once

    async def body() -> int:
        before = clients_created()
        await chat(wide, "flowkit-test", user("first"), {})
        # The slow start doubles the window every round trip: 4 + 8 + 16 + 32 requests go
        # before it reaches 64, so give it enough to fill the pool afterwards.
        done = await asyncio.gather(
            *(chat(wide, "flowkit-test", user(f"w{i}"), {}) for i in range(140))
        )
        assert all(r.text for r in done)
        return clients_created() - before

    try:
        assert asyncio.run(body()) == 1
    finally:
        server.configure(latency=0.0)
    # The pool is sized to the endpoint's limit, not to httpx's 20-connection transport
    # default: more than 20 were in flight at once (all 64 on an idle machine; a loaded one may
    # be a few short of sending them all within one reply's latency).
    assert 20 < server.stats()["max_in_flight"] <= 64


def test_a_first_contact_opens_at_full_concurrency(server: LocalServer) -> None:
    server.configure(latency=0.2)  # long enough for every request to be in flight at once

    def peak(slow_start: bool | None) -> int:
        limits = FAST.model_copy(update={"concurrency": 64, "slow_start": slow_start})
        ep = endpoint(server, limits, connection=f"slow-start-{slow_start}")
        server.reset()

        async def body() -> None:
            calls = (chat(ep, "flowkit-test", user(f"s{i}"), {}) for i in range(64))
            assert all(r.text for r in await asyncio.gather(*calls))

        asyncio.run(body())
        return server.stats()["max_in_flight"]

    try:
        # A local server (no headers expected): all 64 at once, no ramp. Told to wait for the
        # first reply's headers: one alone, then (none came) the other 63 at once.
        assert (peak(None), peak(True)) == (64, 63)
    finally:
        server.configure(latency=0.0)


def test_worker_threads_with_their_own_loops(server: LocalServer) -> None:
    ep = endpoint(server)
    results: dict[int, list[str]] = {}

    def worker(index: int) -> None:
        async def body() -> list[str]:
            calls = (chat(ep, "flowkit-test", user(f"t{index} q{i}"), {}) for i in range(20))
            return [r.text for r in await asyncio.gather(*calls)]

        results[index] = asyncio.run(body())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert sorted(results) == [0, 1, 2]
    assert all(len(texts) == 20 and all(texts) for texts in results.values())
    assert server.stats()["chat_completions"] == 60


def test_azure_routes_to_the_pinned_deployment(server: LocalServer) -> None:
    ep = Endpoint(
        connection="az",
        kind="azure",
        model="gpt-4o",
        azure_endpoint=server.url,
        api_version="2024-06-01",
        deployment="gpt4o-prod",
        api_key="az-key",  # type: ignore[arg-type]
        limits=FAST,
    )

    async def body() -> None:
        result = await chat(ep, "gpt-4o", user("[[reply: from azure]]"), {"max_tokens": 10})
        assert (result.text, result.model) == ("from azure", "gpt4o-prod")

    asyncio.run(body())
