"""Token charging (flowkit.llm.charging) over real HTTP: the pacer charges a request what the
test server, charging as hosted endpoints do, takes from its budget; a wrong rule is corrected
from the rate-limit headers; a request over the whole budget is refused before it is sent."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import pytest

from flowkit.llm import Endpoint, Limits
from flowkit.llm.charging import RULES, OverBudget, TokenCharge, prompt_tokens
from flowkit.llm.client import chat
from flowkit.llm.scheduler import Scheduler
from flowkit.testing.server import ServerConfig, serve

PROMPT = "Is the answer supported by the context? The context says the sky is blue. " * 6


def _endpoint(base_url: str, rule: TokenCharge | None, **limits: Any) -> Endpoint:
    return Endpoint(
        connection="local",
        kind="openai",
        model="flowkit-test",
        base_url=base_url,
        limits=Limits(concurrency=1, max_retries=0, token_charge=rule, **limits),
    )


def _sequential(
    ep: Endpoint,
    sched: Scheduler,
    calls: int,
    params: dict[str, Any],
    pause: float = 0.0,
    prompt: str = PROMPT,
) -> None:
    async def body() -> None:
        for i in range(calls):
            await asyncio.sleep(pause)
            messages = [
                {"role": "system", "content": "You grade answers."},
                {"role": "user", "content": f"{prompt} Row {i}."},
            ]
            await chat(ep, "flowkit-test", messages, params, scheduler=sched)

    asyncio.run(body())


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("params", [{"max_tokens": 40}, {"max_tokens": 300, "n": 2}, {}])
def test_the_pacer_charges_what_the_server_takes(rule: TokenCharge, params: dict) -> None:
    # A budget the run never nears: only the charges are compared, not the pacing.
    with serve(tpm=10**7, rate_headers=True, token_charge=rule) as srv:
        ep = _endpoint(srv.base_url, rule)
        sched = Scheduler(ep.limits, name="local", url=ep.url)
        _sequential(ep, sched, 5, params)
        charged = srv.stats()["charged_tokens"]
    assert charged > 0
    assert sched.stats.charged_tokens == charged


@pytest.mark.parametrize(
    ("told", "server"), [("usage", "prompt_plus_max"), ("prompt_plus_max", "usage")]
)
def test_a_wrong_rule_is_learned_from_the_headers(told: TokenCharge, server: str) -> None:
    # 1,000 tokens a second, a 10,000-token top: the budget neither fills nor runs dry
    # between two replies, so each fall of x-ratelimit-remaining-tokens is a request's charge.
    with serve(tpm=6 * 10**5, limit_window=600, rate_headers=True, token_charge=server) as srv:
        ep = _endpoint(srv.base_url, told)
        sched = Scheduler(ep.limits, name="local", url=ep.url, window=600)
        _sequential(ep, sched, 3, {"max_tokens": 300})
        ours, theirs = sched.stats.charged_tokens, srv.stats()["charged_tokens"]
        _sequential(ep, sched, 5, {"max_tokens": 300})
        ours_then, theirs_then = sched.stats.charged_tokens, srv.stats()["charged_tokens"]
        _sequential(ep, sched, 4, {"max_tokens": 300})
        last_ours = sched.stats.charged_tokens - ours_then
        last_theirs = srv.stats()["charged_tokens"] - theirs_then
    # The rule told is far off (the first requests show it), the last ones are charged right.
    assert abs(ours / theirs - 1) > 0.3
    assert last_ours == pytest.approx(last_theirs, rel=0.1)


@pytest.mark.slow  # a request every 250 ms, so the budget is whole again before each
def test_an_overcharging_rule_is_learned_while_the_budget_refills_between_replies() -> None:
    # The connection says prompt_plus_max, the server charges max_of: flowkit overcharges, so
    # the budget refills faster than flowkit spends it (undercharging drains it, and the fall
    # between readings measures it: test_a_wrong_rule_is_learned_from_the_headers).
    told, server = "prompt_plus_max", "max_of"
    # 5,000 tokens a second and a 10,000-token top, a request every 250 ms charged about
    # 1,000 or 2,000: the budget is whole again before the next reply (the reset says so), so
    # no fall between two readings measures a charge; each reading's shortfall from the top,
    # replayed against the requests sent, does.
    with serve(tpm=6 * 10**5, limit_window=120, rate_headers=True, token_charge=server) as srv:
        ep = _endpoint(srv.base_url, told)
        sched = Scheduler(ep.limits, name="local", url=ep.url, window=120)
        params, prompt = {"max_tokens": 1000}, PROMPT * 9

        def run(calls: int) -> tuple[int, int]:
            before = sched.stats.charged_tokens, srv.stats()["charged_tokens"]
            _sequential(ep, sched, calls, params, pause=0.25, prompt=prompt)
            return (
                sched.stats.charged_tokens - before[0],
                srv.stats()["charged_tokens"] - before[1],
            )

        ours, theirs = run(3)
        run(5)
        last_ours, last_theirs = run(4)
    assert abs(ours / theirs - 1) > 0.3
    assert last_ours == pytest.approx(last_theirs, rel=0.1)


def test_a_request_over_the_whole_budget_is_refused_before_sending() -> None:
    with serve(tpm=10**6) as srv:
        ep = _endpoint(srv.base_url, "prompt_plus_max", tpm=5000)
        sched = Scheduler(ep.limits, name="local", url=ep.url)
        messages = [{"role": "user", "content": "x" * 400}]
        with pytest.raises(OverBudget) as caught:
            asyncio.run(chat(ep, "flowkit-test", messages, {"max_tokens": 6000}, scheduler=sched))
        requests = srv.stats()["requests"]
    assert str(caught.value) == (
        "request refused before sending: it costs an estimated 6,104 tokens (prompt 104 + "
        f"max_tokens × n 6,000), more than the 5,000 tokens per minute {ep.url} allows in all; "
        "lower max_tokens (or n), or shorten the prompt"
    )
    assert requests == 0
    assert sched.stats.errors == 1


def test_the_server_names_its_rules() -> None:
    with pytest.raises(ValueError) as caught:
        ServerConfig(token_charge="prompt")
    assert str(caught.value) == (
        "invalid ServerConfig: token_charge must be one of ['prompt_plus_max', 'max_of', "
        "'usage'], got 'prompt'"
    )


def test_the_server_reports_its_budget_as_it_stands_at_the_reply() -> None:
    # 100 tokens a second, a 100-token top; the reply comes 0.3 s after the charge, by which
    # time 30 tokens came back: headers computed at the charge would say 100 - charge.
    with serve(tpm=6000, latency=0.3, rate_headers=True, token_charge="prompt_plus_max") as srv:
        body = {"model": "flowkit-test", "messages": [{"role": "user", "content": "hi"}]}
        request = urllib.request.Request(
            f"{srv.base_url}/chat/completions",
            data=json.dumps({**body, "max_tokens": 50}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request) as reply:
            remaining = int(reply.headers["x-ratelimit-remaining-tokens"])
    charge = 50 + prompt_tokens("flowkit-test", body["messages"])
    assert remaining >= 100 - charge + 25
