"""The local OpenAI-compatible server, exercised only through the real openai client."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from flowkit.llm.ratelimits import parse_duration
from flowkit.testing.__main__ import parse_config
from flowkit.testing.server import (
    LocalServer,
    ServerConfig,
    prompt_hash,
    serve,
    serve_subprocess,
)


@pytest.fixture(scope="module")
def shared() -> Iterator[LocalServer]:
    with serve() as server:
        yield server


@pytest.fixture
def srv(shared: LocalServer) -> LocalServer:
    # One server for the module keeps it fast; each test starts from a clean config and counters.
    shared.config = ServerConfig()
    shared.reset()
    return shared


@pytest.fixture
def client(srv: LocalServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="test", base_url=srv.base_url, max_retries=0, timeout=5)


def ask(client: openai.OpenAI, text: str, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model="flowkit-test", messages=[{"role": "user", "content": text}], **kwargs
    )


def expected_score(text: str) -> int:
    return int(prompt_hash([{"role": "user", "content": text}])[:8], 16) % 5 + 1


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_default_reply_is_deterministic_and_well_formed(client: openai.OpenAI) -> None:
    first = ask(client, "Rate this answer: Paris is the capital of France.")
    again = ask(client, "Rate this answer: Paris is the capital of France.")
    score = expected_score("Rate this answer: Paris is the capital of France.")
    assert first.choices[0].message.content == again.choices[0].message.content == f"Score: {score}"
    assert first.object == "chat.completion" and first.model == "flowkit-test"
    assert first.choices[0].finish_reason == "stop" and first.choices[0].message.role == "assistant"
    assert first.usage is not None
    assert first.usage.prompt_tokens == 9 and first.usage.completion_tokens == 2
    assert first.usage.total_tokens == 11
    scores = {ask(client, f"prompt {i}").choices[0].message.content for i in range(30)}
    assert len(scores) > 1, "different prompts should not all get one score"


def test_reply_directive_spans_lines(client: openai.OpenAI) -> None:
    text = 'system says [[reply: {"verdict": "pass",\n"notes": "two lines"}]] ok'
    content = ask(client, text).choices[0].message.content
    assert json.loads(content) == {"verdict": "pass", "notes": "two lines"}


def test_n_choices_and_max_tokens(client: openai.OpenAI) -> None:
    result = ask(client, "pick", n=3)
    assert [c.index for c in result.choices] == [0, 1, 2]
    assert all(re.fullmatch(r"Score: [1-5]", c.message.content or "") for c in result.choices)
    assert result.usage is not None and result.usage.completion_tokens == 6

    long = "[[reply: one two three four five six]]"
    cut = ask(client, long, max_tokens=3).choices[0]
    assert (cut.message.content, cut.finish_reason) == ("one two three", "length")
    cut = ask(client, long, max_completion_tokens=4).choices[0]
    assert (cut.message.content, cut.finish_reason) == ("one two three four", "length")
    whole = ask(client, long, max_tokens=6).choices[0]
    assert whole.finish_reason == "stop"


def test_finish_and_empty_reply_directives(client: openai.OpenAI) -> None:
    cut = ask(client, "[[reply: The answer is mostly]] [[finish: length]]").choices[0]
    assert (cut.message.content, cut.finish_reason) == ("The answer is mostly", "length")
    empty = ask(client, "[[reply: ]]").choices[0]
    assert (empty.message.content, empty.finish_reason) == ("", "stop")
    with pytest.raises(openai.BadRequestError) as err:
        ask(client, "[[finish: tired]]")
    assert err.value.body["message"] == (  # type: ignore[index]
        "bad [[finish: tired]]: reason must be one of stop, length, content_filter"
    )


def test_json_modes(client: openai.OpenAI) -> None:
    reply = ask(client, "judge", response_format={"type": "json_object"})
    data = json.loads(reply.choices[0].message.content or "")
    assert data["score"] == expected_score("judge") and isinstance(data["reason"], str)

    class Verdict(BaseModel):
        score: int
        passed: bool
        labels: list[str]

    parsed = client.chat.completions.parse(
        model="flowkit-test",
        messages=[{"role": "user", "content": "judge"}],
        response_format=Verdict,
    )
    verdict = parsed.choices[0].message.parsed
    assert verdict is not None and verdict.score == expected_score("judge")


def test_logprobs_peak_at_the_score(client: openai.OpenAI) -> None:
    result = ask(client, "[[reply: 4]]", logprobs=True, top_logprobs=5)
    content = result.choices[0].logprobs.content  # type: ignore[union-attr]
    first = content[0]
    assert first.token == "4" and len(first.top_logprobs) == 5
    assert first.top_logprobs[0].token == "4" and first.logprob == first.top_logprobs[0].logprob
    assert {t.token for t in first.top_logprobs} == {"2", "3", "4", "5", "6"}
    assert 0.5 < sum(math.exp(t.logprob) for t in first.top_logprobs) <= 1.0 + 1e-9
    assert first.top_logprobs[0].bytes == [ord("4")]

    default = ask(client, "grade me", logprobs=True, top_logprobs=3).choices[0]
    tokens = default.logprobs.content  # type: ignore[union-attr]
    assert "".join(t.token for t in tokens) == default.message.content
    assert tokens[0].top_logprobs[0].token == str(expected_score("grade me"))
    assert all(t.logprob <= 0 for t in tokens)
    assert ask(client, "grade me").choices[0].logprobs is None


def test_embeddings_float_and_base64(client: openai.OpenAI) -> None:
    texts = ["the cat sat on the mat", "a cat sat on a mat", "quarterly revenue grew 8%"]
    default = client.embeddings.create(model="text-embedding-3-small", input=texts)  # base64
    floats = client.embeddings.create(model="e", input=texts, encoding_format="float")
    vectors = [d.embedding for d in default.data]
    assert [len(v) for v in vectors] == [64, 64, 64]
    for packed, plain in zip(vectors, (d.embedding for d in floats.data), strict=True):
        assert packed == pytest.approx(plain, abs=1e-6)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2
    single = client.embeddings.create(model="e", input=texts[0], dimensions=16)
    assert len(single.data[0].embedding) == 16
    again = client.embeddings.create(model="e", input=[texts[0]])
    assert again.data[0].embedding == vectors[0]
    assert default.usage.prompt_tokens == 6 + 6 + 4


def test_rate_limit_fault_exposes_retry_after(srv: LocalServer, client: openai.OpenAI) -> None:
    srv.config.retry_after = 0
    with pytest.raises(openai.RateLimitError) as caught:
        ask(client, "[[fault: 429]] hi")
    assert caught.value.response.headers["retry-after"] == "0"
    assert caught.value.response.headers["retry-after-ms"] == "0"
    srv.config.retry_after = 2.5
    with pytest.raises(openai.RateLimitError) as caught:
        ask(client, "[[fault: 429]] hi")
    assert caught.value.response.headers["retry-after"] == "2.5"
    assert caught.value.response.headers["retry-after-ms"] == "2500"


def test_server_error_timeout_malformed_garbage(srv: LocalServer, client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError):
        ask(client, "[[fault: 500]]")
    # A stall far longer than the client's timeout: the client gives up at its own 0.3 s, however
    # loaded the machine, and never sees the reply the server would send after 60 s.
    srv.config.timeout_delay = 60.0
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        ask(client, "[[fault: timeout]]", timeout=0.3)
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 30  # the stalled handler is cancelled once the client hangs up
    while srv.stats()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert srv.stats()["in_flight"] == 0
    with pytest.raises(ValueError):  # the client cannot decode half a JSON document
        ask(client, "[[fault: malformed]]")
    garbage = ask(client, "[[fault: garbage]] rate it").choices[0].message.content or ""
    assert garbage and not garbage.startswith("Score:")
    faults = srv.stats()["faults"]
    assert faults == {"500": 1, "timeout": 1, "malformed": 1, "garbage": 1}
    with pytest.raises(openai.BadRequestError, match="kind must be one of"):
        ask(client, "[[fault: 418]]")


def test_fault_once_then_the_retry_gets_the_normal_answer(srv: LocalServer) -> None:
    text = "[[fault-once: 500]] score this"
    plain = openai.OpenAI(api_key="t", base_url=srv.base_url, max_retries=0)
    with pytest.raises(openai.InternalServerError):
        ask(plain, text)
    assert ask(plain, text).choices[0].message.content == f"Score: {expected_score(text)}"
    srv.reset()  # forgets attempts, so the fault fires again, and the client's retry absorbs it
    srv.config.retry_after = 0.01
    retrying = openai.OpenAI(api_key="t", base_url=srv.base_url, max_retries=1)
    assert ask(retrying, "[[fault-once: 429]] x").choices[0].message.content is not None
    assert srv.stats()["by_status"] == {"429": 1, "200": 1}


def test_random_faults_are_reproducible(srv: LocalServer, client: openai.OpenAI) -> None:
    srv.config = ServerConfig(rate_500=0.5, seed=7)

    def outcomes() -> list[bool]:
        results = []
        for i in range(20):
            try:
                ask(client, f"question {i}")
                results.append(True)
            except openai.InternalServerError:
                results.append(False)
        return results

    first = outcomes()
    assert 0 < sum(first) < 20
    second = outcomes()  # second attempts draw afresh
    assert second != first
    srv.reset()
    assert outcomes() == first


def test_rate_budgets_answer_429_with_retry_after_and_rate_headers(
    srv: LocalServer, client: openai.OpenAI
) -> None:
    srv.configure(rpm=60, rate_headers=True)  # a bucket of one request, refilled at 1 per second
    first = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "q0"}]
    )
    assert first.headers["x-ratelimit-limit-requests"] == "60"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    assert parse_duration(first.headers["x-ratelimit-reset-requests"]) == pytest.approx(1, abs=0.1)
    with pytest.raises(openai.RateLimitError) as caught:
        ask(client, "q1")
    headers = caught.value.response.headers
    assert headers["retry-after"] == "1"
    assert 800 <= int(headers["retry-after-ms"]) <= 1000
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert srv.stats()["faults"] == {"rpm": 1}
    srv.reset()
    assert ask(client, "q6").choices  # a reset starts a full budget
    srv.configure(rpm=0, tpm=600, rate_headers=False)  # ten tokens, refilled at 10 per second
    ask(client, "one two three four")  # 4 prompt + 2 completion tokens
    ask(client, "one two three four")  # 4 more fit; the 2 completion tokens go into debt
    with pytest.raises(openai.RateLimitError, match="600 tokens per window") as caught:
        ask(client, "one two three four")
    assert "x-ratelimit-limit-tokens" not in caught.value.response.headers


def test_api_key_is_enforced(srv: LocalServer) -> None:
    srv.config.api_key = "sekret"
    wrong = openai.OpenAI(api_key="nope", base_url=srv.base_url, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        ask(wrong, "hi")
    right = openai.OpenAI(api_key="sekret", base_url=srv.base_url, max_retries=0)
    assert ask(right, "hi").choices
    assert [m.id for m in right.models.list()] == srv.config.models
    assert srv.stats()["by_status"] == {"401": 1, "200": 2}


def test_azure_deployment_path(srv: LocalServer) -> None:
    srv.config.api_key = "azure-key"

    async def main() -> tuple[Any, Any]:
        client = openai.AsyncAzureOpenAI(
            api_key="azure-key", azure_endpoint=srv.url, api_version="2024-06-01", max_retries=0
        )
        chat = await client.chat.completions.create(
            model="my-gpt4o-deployment", messages=[{"role": "user", "content": "hello"}]
        )
        emb = await client.embeddings.create(model="my-embeddings", input="hello world")
        await client.close()
        return chat, emb

    chat, emb = asyncio.run(main())
    assert chat.model == "my-gpt4o-deployment"
    assert chat.choices[0].message.content == f"Score: {expected_score('hello')}"
    assert emb.model == "my-embeddings" and len(emb.data[0].embedding) == 64


def test_stats_concurrency_hook_rules_and_latency(srv: LocalServer) -> None:
    srv.config.latency = 0.1

    async def main() -> list[str]:
        client = openai.AsyncOpenAI(api_key="t", base_url=srv.base_url, max_retries=0)
        replies = await asyncio.gather(
            *(
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"item {i % 4}"}]
                )
                for i in range(8)
            )
        )
        await client.close()
        return [r.choices[0].message.content or "" for r in replies]

    replies = asyncio.run(main())
    assert replies[:4] == replies[4:]
    stats = srv.stats()
    assert stats["requests"] == 8 and stats["chat_completions"] == 8
    assert stats["by_endpoint"] == {"chat.completions": 8}
    # Overlapping, not queued: the server's own count, which a loaded machine cannot fake.
    assert stats["max_in_flight"] >= 4
    assert stats["distinct_prompts"] == 4 and set(stats["prompts"].values()) == {2}
    assert stats["prompt_tokens"] == 16 and stats["completion_tokens"] == 16

    srv.configure(latency=0.0, rules=[(r"^capital of (\w+)", "Paris")])
    srv.config.hook = lambda body: "hooked" if body.get("temperature") == 0.5 else None
    client = openai.OpenAI(api_key="t", base_url=srv.base_url, max_retries=0)
    assert ask(client, "capital of France?").choices[0].message.content == "Paris"
    assert ask(client, "capital of Peru?", temperature=0.5).choices[0].message.content == "hooked"
    started = time.monotonic()
    ask(client, "[[latency: 0.3]] slow one")
    assert time.monotonic() - started >= 0.3

    def broken(body: dict[str, Any]) -> str:
        raise KeyError("no such fixture")

    srv.config.hook = broken
    with pytest.raises(openai.InternalServerError, match="KeyError: 'no such fixture'"):
        ask(client, "anything")
    srv.reset()
    assert srv.stats()["requests"] == 0 and srv.stats()["prompts"] == {}


def test_subprocess_mode_matches_in_process(client: openai.OpenAI) -> None:
    in_process = ask(client, "same prompt everywhere").choices[0].message.content
    with serve_subprocess(ServerConfig(rpm=100), retry_after=0) as child:
        remote = openai.OpenAI(api_key="t", base_url=child.base_url, max_retries=0)
        assert ask(remote, "same prompt everywhere").choices[0].message.content == in_process
        child.configure(api_key="k")
        with pytest.raises(openai.AuthenticationError):
            ask(remote, "again")
        stats = child.stats()
        assert stats["by_status"] == {"200": 1, "401": 1} and stats["distinct_prompts"] == 1
        child.reset()
        assert child.stats()["requests"] == 0
    assert child.process.poll() is not None


def test_config_validation_and_cli_parsing() -> None:
    with pytest.raises(ValueError, match="rate_500 is a probability"):
        ServerConfig(rate_500=1.5)
    with pytest.raises(ValueError, match="add up to more than 1"):
        ServerConfig(rate_429=0.6, rate_500=0.6)
    with pytest.raises(ValueError, match="does not compile"):
        ServerConfig(rules=[("(", "x")])
    with (
        pytest.raises(ValueError, match="cannot be sent to a subprocess"),
        serve_subprocess(hook=lambda body: None),
    ):
        pass
    config = parse_config(
        [
            "--rpm",
            "5",
            "--rate-429",
            "0.2",
            "--models",
            "a, b",
            "--rule",
            "hi",
            "hello",
            "--config-json",
            '{"latency": 0.5}',
        ]
    )
    assert (config.rpm, config.rate_429, config.models) == (5, 0.2, ["a", "b"])
    assert (config.rules, config.latency, config.host) == ([("hi", "hello")], 0.5, "127.0.0.1")
    with pytest.raises(SystemExit, match="unknown ServerConfig field"):
        parse_config(["--config-json", '{"colour": 1}'])


def test_token_slice_sets_how_much_of_the_tpm_budget_may_arrive_at_once() -> None:
    from flowkit.testing.faults import RateLimited, RateWindow

    # 600 tokens a minute: a one-second slice holds 10, Azure's running minute all 600.
    strict, azure = RateWindow(), RateWindow(token_slice=60.0)
    strict.admit(0.0, 10, 0, 600, 60.0, False)
    with pytest.raises(RateLimited):
        strict.admit(0.0, 10, 0, 600, 60.0, False)
    for _ in range(60):
        azure.admit(0.0, 10, 0, 600, 60.0, False)
    with pytest.raises(RateLimited):
        azure.admit(0.0, 10, 0, 600, 60.0, False)
    with pytest.raises(ValueError, match="token_slice"):
        ServerConfig(token_slice=0)
