"""Token usage per node and per run, and a cost *estimate* from a price table.

Costs are only ever computed from a known price: a model missing from the table gets
``None``, never a guessed number, because a wrong cost in a CI report is worse than none.
The built-in table is a convenience snapshot of public list prices; prices change and
contracts differ, so users extend or override it in ``flowkit.yaml`` under ``prices``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from flowkit.llm.endpoint import Price

PRICES_AS_OF = "2025-06"
"""When the built-in list prices were copied; they are an estimate, not a bill."""

BUILTIN_PRICES: dict[str, Price] = {
    # USD per 1M tokens (input, output), OpenAI public list prices as of PRICES_AS_OF.
    "gpt-4o": Price(input=2.50, output=10.00),
    "gpt-4o-mini": Price(input=0.15, output=0.60),
    "gpt-4.1": Price(input=2.00, output=8.00),
    "gpt-4.1-mini": Price(input=0.40, output=1.60),
    "gpt-4.1-nano": Price(input=0.10, output=0.40),
    "o3-mini": Price(input=1.10, output=4.40),
    "gpt-3.5-turbo": Price(input=0.50, output=1.50),
    "text-embedding-3-small": Price(input=0.02, output=0.0),
    "text-embedding-3-large": Price(input=0.13, output=0.0),
}

BATCH_SHARE = 0.5
"""What a token sent through a batch API costs, as a share of its list price (OpenAI, Azure
global batch and most OpenAI-compatible providers charge half); ``batch_prices`` overrides."""

_SNAPSHOT = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model``: user table first, then built-in; dated snapshots fall back
    to their base name (``gpt-4o-2024-08-06`` → ``gpt-4o``), nothing fuzzier than that."""
    tables = [prices or {}, BUILTIN_PRICES]
    for name in (model, _SNAPSHOT.sub("", model)):
        for table in tables:
            if name in table:
                return table[name]
    return None


def cost_usd(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    prices: Mapping[str, Price] | None = None,
) -> float | None:
    """Estimated USD for one model's tokens, or None when its price is unknown."""
    price = price_for(model, prices)
    if price is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / 1_000_000


def batch_cost_usd(
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    prices: Mapping[str, Price] | None = None,
    batch_prices: Mapping[str, Price] | None = None,
) -> float | None:
    """Estimated USD for one model's tokens sent through a batch API: the user's batch price,
    else ``BATCH_SHARE`` of the price; None when neither is known."""
    for name in (model, _SNAPSHOT.sub("", model)):
        price = (batch_prices or {}).get(name)
        if price is not None:
            return (prompt_tokens * price.input + completion_tokens * price.output) / 1_000_000
    cost = cost_usd(model, prompt_tokens, completion_tokens, prices)
    return None if cost is None else cost * BATCH_SHARE


@dataclass
class Tally:
    """Summed usage of some set of calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    calls: int = 0

    def add(self, usage: Mapping[str, int]) -> None:
        """Add one call's usage dict (prompt_tokens, completion_tokens, total_tokens)."""
        prompt = int(usage.get("prompt_tokens", 0) or 0)
        completion = int(usage.get("completion_tokens", 0) or 0)
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.total_tokens += int(usage.get("total_tokens", 0) or 0) or prompt + completion
        self.calls += 1


@dataclass
class UsageTracker:
    """Usage of one run, per node and per model, with an optional user price table.

    Calls are recorded per (node, model) so a node whose model changed mid-run (or whose
    calls went to several models) is still priced correctly.
    """

    prices: Mapping[str, Price] = field(default_factory=dict)
    _by_node_model: dict[tuple[str, str], Tally] = field(default_factory=dict)

    def record(self, node: str, model: str, usage: Mapping[str, int]) -> None:
        """Count one call of ``node`` to ``model``."""
        self._by_node_model.setdefault((node, model), Tally()).add(usage)

    def node(self, name: str) -> Tally:
        """Summed usage of one node across models."""
        return _sum(t for (n, _), t in self._by_node_model.items() if n == name)

    def total(self) -> Tally:
        """Summed usage of the whole run."""
        return _sum(self._by_node_model.values())

    def node_cost(self, name: str) -> float | None:
        """Estimated USD of one node, or None if any of its models has no price."""
        return self._cost(k for k in self._by_node_model if k[0] == name)

    def total_cost(self) -> float | None:
        """Estimated USD of the run, or None if any model used has no price."""
        return self._cost(self._by_node_model)

    def _cost(self, keys: Iterable[tuple[str, str]]) -> float | None:
        total = 0.0
        for key in keys:
            tally = self._by_node_model[key]
            cost = cost_usd(key[1], tally.prompt_tokens, tally.completion_tokens, self.prices)
            if cost is None:
                return None
            total += cost
        return total

    def summary(self) -> dict[str, object]:
        """A JSON-able report: per-node and total usage with cost estimates."""
        nodes = sorted({n for n, _ in self._by_node_model})
        return {
            "nodes": {n: {**asdict(self.node(n)), "cost_usd": self.node_cost(n)} for n in nodes},
            "total": {**asdict(self.total()), "cost_usd": self.total_cost()},
            "cost_note": f"estimate from list prices as of {PRICES_AS_OF} plus flowkit.yaml "
            "prices; None where a model's price is unknown",
        }


def _sum(tallies: Iterable[Tally]) -> Tally:
    out = Tally()
    for t in tallies:
        out.prompt_tokens += t.prompt_tokens
        out.completion_tokens += t.completion_tokens
        out.total_tokens += t.total_tokens
        out.calls += t.calls
    return out
