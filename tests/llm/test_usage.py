"""Usage accumulation and cost estimates: known prices only, never guesses."""

from __future__ import annotations

import pytest

from flowkit.llm.endpoint import Price
from flowkit.llm.usage import BUILTIN_PRICES, PRICES_AS_OF, UsageTracker, cost_usd, price_for


def test_prices_lookup() -> None:
    assert price_for("gpt-4o-mini") == BUILTIN_PRICES["gpt-4o-mini"]
    assert price_for("gpt-4o-2024-08-06") == BUILTIN_PRICES["gpt-4o"]
    assert price_for("gpt-4o-mini-custom") is None  # nothing fuzzier than a dated snapshot
    assert price_for("my-model") is None
    mine = {"my-model": Price(input=0.5, output=1.5), "gpt-4o": Price(input=1, output=1)}
    assert price_for("my-model", mine) == mine["my-model"]
    assert price_for("gpt-4o", mine) == mine["gpt-4o"]  # the user's table wins
    assert PRICES_AS_OF


def test_cost_of_known_and_unknown_models() -> None:
    assert cost_usd("my-model", 1_000_000, 0) is None
    assert cost_usd(
        "my-model", 2_000_000, 1_000_000, {"my-model": Price(input=0.5, output=1.5)}
    ) == (pytest.approx(2.5))


def test_tracker_sums_per_node_and_run() -> None:
    tracker = UsageTracker(prices={"judge-model": Price(input=1.0, output=2.0)})
    tracker.record("answer", "gpt-4o-mini", {"prompt_tokens": 1000, "completion_tokens": 500})
    tracker.record(
        "answer", "gpt-4o-mini", {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    )
    tracker.record("judge", "judge-model", {"prompt_tokens": 1_000_000, "completion_tokens": 0})
    answer = tracker.node("answer")
    assert (answer.prompt_tokens, answer.completion_tokens, answer.total_tokens, answer.calls) == (
        1010,
        505,
        1515,
        2,
    )
    total = tracker.total()
    assert (total.total_tokens, total.calls) == (1_001_515, 3)
    assert tracker.node_cost("judge") == pytest.approx(1.0)
    assert tracker.node_cost("answer") == pytest.approx((1010 * 0.15 + 505 * 0.60) / 1e6)
    assert tracker.total_cost() == pytest.approx(1.0 + (1010 * 0.15 + 505 * 0.60) / 1e6)
    summary = tracker.summary()
    assert summary["total"]["calls"] == 3  # type: ignore[index]
    assert "estimate" in str(summary["cost_note"])


def test_unknown_model_makes_the_cost_unknown() -> None:
    tracker = UsageTracker()
    tracker.record("a", "gpt-4o", {"prompt_tokens": 10, "completion_tokens": 10})
    tracker.record("b", "local-llama", {"prompt_tokens": 10, "completion_tokens": 10})
    assert tracker.node_cost("a") is not None
    assert tracker.node_cost("b") is None
    assert tracker.total_cost() is None
    assert tracker.summary()["nodes"]["b"]["cost_usd"] is None  # type: ignore[index]
