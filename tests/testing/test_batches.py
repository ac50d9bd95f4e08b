"""The test server's batch API, through the openai SDK's files and batches resources."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest

from flowkit.testing.server import LocalServer
from tests.testing.test_server import client, shared, srv

__all__ = ["client", "shared", "srv"]  # the fixtures: one server, clean for each test


def line(custom_id: str, text: str, url: str = "/v1/chat/completions") -> dict[str, Any]:
    body = {"model": "flowkit-test", "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def submit(client: openai.OpenAI, lines: list[dict[str, Any]], **metadata: str) -> Any:
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    upload = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    return client.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata=metadata or None,
    )


def records(client: openai.OpenAI, file_id: str | None) -> dict[str, Any]:
    if file_id is None:
        return {}
    text = client.files.content(file_id).text
    return {r["custom_id"]: r for r in map(json.loads, text.splitlines())}


def test_a_batch_moves_through_its_statuses_and_answers_as_chat_completions_do(
    srv: LocalServer, client: openai.OpenAI
) -> None:
    srv.configure(batch_delay=0.6)
    batch = submit(client, [line("a", "first"), line("b", "second")], flowkit_nonce="n1")
    seen = [batch.status]
    while batch.status not in ("completed", "failed", "expired"):
        time.sleep(0.05)
        batch = client.batches.retrieve(batch.id)
        if batch.status != seen[-1]:
            seen.append(batch.status)
    assert seen == ["validating", "in_progress", "finalizing", "completed"]
    assert batch.metadata == {"flowkit_nonce": "n1"}
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (2, 2)
    out = records(client, batch.output_file_id)
    online = client.chat.completions.create(
        model="flowkit-test", messages=[{"role": "user", "content": "first"}]
    )
    reply = out["a"]["response"]["body"]
    assert out["a"]["response"]["status_code"] == 200 and out["a"]["error"] is None
    assert reply["choices"][0]["message"]["content"] == online.choices[0].message.content
    assert batch.error_file_id is None
    stats = srv.stats()
    assert (stats["batches_created"], stats["batch_lines"]) == (1, 2)
    assert stats["chat_completions"] == 1  # the online one: batch lines are counted apart
    assert [b.id for b in client.batches.list()] == [batch.id]


def test_failed_lines_and_expiry_go_to_the_error_file(
    srv: LocalServer, client: openai.OpenAI
) -> None:
    srv.configure(batch_fail_rate=1.0)
    failed = client.batches.retrieve(submit(client, [line("a", "x")]).id)
    assert failed.status == "completed" and failed.output_file_id is None
    (error,) = records(client, failed.error_file_id).values()
    assert error["response"]["status_code"] == 500
    assert error["response"]["body"]["error"]["message"] == (
        "The server had an error (fault injected)"
    )
    srv.configure(batch_fail_rate=0.0, batch_expiring=2, batch_expire_done=0.5)
    expired = client.batches.retrieve(submit(client, [line(str(i), f"q{i}") for i in range(4)]).id)
    assert expired.status == "expired"
    assert sorted(records(client, expired.output_file_id)) == ["0", "1"]
    assert {k: r["error"] for k, r in records(client, expired.error_file_id).items()} == {
        k: {
            "code": "batch_expired",
            "message": "This request could not be executed before the completion window expired.",
        }
        for k in ("2", "3")
    }
    assert srv.stats()["batch_lines"] == 2  # the failed line and the unfinished half: unpaid


def test_cancel_stops_a_running_batch_and_bad_input_fails_one(
    srv: LocalServer, client: openai.OpenAI
) -> None:
    srv.configure(batch_delay=600.0)
    running = submit(client, [line("a", "x")])
    cancelled = client.batches.cancel(running.id)
    assert cancelled.status == "cancelled"
    assert srv.stats()["batches_cancelled"] == 1 and srv.stats()["batch_lines"] == 0
    srv.configure(batch_delay=0.0)
    twice = client.batches.retrieve(submit(client, [line("a", "x"), line("a", "y")]).id)
    assert twice.status == "failed"
    assert twice.errors is not None and twice.errors.data is not None
    assert twice.errors.data[0].message == "line 2: custom_id 'a' is used twice"
    other = client.batches.retrieve(submit(client, [line("a", "x", url="/v1/embeddings")]).id)
    assert other.errors is not None and other.errors.data is not None
    assert other.errors.data[0].message == (
        "line 1: every line must be a POST to /v1/chat/completions"
    )
    with pytest.raises(openai.NotFoundError, match="No such Batch object: batch_nope"):
        client.batches.retrieve("batch_nope")
