"""Failures are per call: lines in the error file and the unfinished part of an expired batch
are sent again in a later batch (or online), each keeping what went wrong in its trace, and no
call is paid twice."""

from __future__ import annotations

from pathlib import Path

import flowkit
from flowkit.testing.server import LocalServer
from tests.batch.conftest import questions
from tests.batch.test_waves import outputs
from tests.support import write

ROWS = 20


def test_failed_lines_and_an_expired_batch_are_sent_again(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    data = questions(tmp_path, ROWS)
    online = flowkit.run(chained, data, cache_dir=tmp_path / "c1", runs_root=tmp_path / "r")
    llm_server.reset()
    llm_server.configure(batch_fail_rate=0.3, batch_expiring=1, batch_expire_done=0.5)
    try:
        batched = flowkit.run(
            chained, data, cache_dir=tmp_path / "c2", runs_root=tmp_path / "r", batch=True
        )
    finally:
        llm_server.configure(batch_fail_rate=0.0, batch_expiring=0)
    stats = llm_server.stats()
    assert batched.counts["succeeded"] == ROWS
    assert outputs(batched) == outputs(online)
    # Every call answered exactly once: what failed or expired was not paid.
    assert (stats["batch_lines"], stats["batch_paid_twice"]) == (2 * ROWS, 0)
    assert stats["batch_statuses"]["expired"] == 1 and stats["batches_created"] > 2
    errors = [
        error
        for trace in batched.traces()
        for batch in (trace["llm"]["raw"] or {}).get("batches", [])
        for error in batch["errors"]
    ]
    expired = [e for e in errors if "batch_expired" in e]
    assert len(expired) == ROWS // 2  # the half the expired batch did not finish
    assert any("HTTP 500: The server had an error (fault injected)" in e for e in errors)


def test_a_call_no_batch_answers_fails_its_node_or_goes_online(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    data = questions(tmp_path, 2)
    llm_server.configure(batch_fail_rate=1.0)
    try:
        failed = flowkit.run(chained, data, runs_root=tmp_path / "r", batch=True, use_cache=False)
        llm_server.reset()
        online = flowkit.run(
            chained,
            data,
            runs_root=tmp_path / "r",
            batch=True,
            batch_fallback="online",
            use_cache=False,
        )
    finally:
        llm_server.configure(batch_fail_rate=0.0)
    (row, _) = failed.rows()
    tries = 7  # the first send and the endpoint's max_retries (6)
    error = "HTTP 500: The server had an error (fault injected)"
    assert row["error"]["type"] == "BatchCallFailed"
    assert row["error"]["message"].startswith(f"no batch answered the call in {tries} tries: ")
    assert row["error"]["message"].count(error) == tries
    assert online.counts["succeeded"] == 2
    assert llm_server.stats()["chat_completions"] == 4  # each call asked online, once
    for trace in online.traces():
        (batch,) = trace["llm"]["raw"]["batches"]
        assert batch["online"] is True and len(batch["errors"]) == tries
        assert "batch_prompt_tokens" not in trace["llm"]["usage"]  # paid at the online price


def test_a_reply_that_is_no_chat_completion_is_asked_again_in_the_next_batch(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    flow = write(
        tmp_path / "one.yaml",
        """
        name: one
        inputs: {q: {type: string}}
        outputs: {reply: "${ask.output}"}
        nodes:
          - name: ask
            type: llm
            messages: [{role: user, content: "{{ q }} [[fault-once: malformed]] [[reply: ok]]"}]
            inputs: {q: "${inputs.q}"}
        """,
    )
    result = flowkit.run(flow, questions(tmp_path, 3), runs_root=tmp_path / "r", batch=True)
    assert [row["outputs"] for row in result.rows()] == [{"reply": "ok"}] * 3
    assert llm_server.stats()["batches_created"] == 2
    for trace in result.traces():
        (batch,) = trace["llm"]["raw"]["batches"]
        (error,) = batch["errors"]
        assert error.endswith(
            ": the endpoint answered 200 but not with a chat completion: "
            "'choices' is missing or null"
        )


REFUSED = """
name: refused
inputs: {q: {type: string}}
outputs: {a: "${a.output}"}
nodes:
  - name: a
    type: llm
    params: {n: 500}
    messages: [{role: user, content: "Rate: {{ q }}"}]
    inputs: {q: "${inputs.q}"}
"""


def test_a_call_the_batch_refuses_with_a_400_is_not_sent_again(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    # A bad parameter gets a 400 in every batch: sending it again costs a batch (hours) a try.
    flow = write(tmp_path / "refused.yaml", REFUSED)
    result = flowkit.run(flow, questions(tmp_path, 2), runs_root=tmp_path / "r", batch=True)
    assert llm_server.stats()["batches_created"] == 1
    assert result.counts["failed"] == 2
    row = next(iter(result.rows()))
    assert row["error"]["type"] == "BatchCallFailed"
    assert row["error"]["message"].startswith("the batch refused the call: batch batch_")
    assert "'n' must be an integer in 1..128" in row["error"]["message"]


def test_a_batch_that_fails_at_validation_says_why_in_each_calls_error(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    # OpenAI fails a whole batch at validation (token_limit_exceeded when a model's queue is
    # full, a file over the limits) and says why in its errors: the reason reaches the rows.
    llm_server.configure(batch_max_requests=1)
    try:
        result = flowkit.run(chained, questions(tmp_path, 2), runs_root=tmp_path / "r", batch=True)
    finally:
        llm_server.configure(batch_max_requests=50_000)
    row = next(iter(result.rows()))
    assert row["error"]["type"] == "BatchCallFailed"
    assert (
        "batch failed (invalid_input: a batch may hold 1 requests at most)"
        in (row["error"]["message"])
    )
