"""What a run's model calls cost: tokens per node with their model, and USD per node and in all.

Calls answered through a batch API are priced at the batch price (``flowkit.llm.usage``), and
the run also says what the same calls would have cost online.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowkit.engine.context import Stats


def with_models(stats: Stats) -> dict[str, dict[str, Any]]:
    return {
        node: {"model": stats.models.get(node), **usage} for node, usage in stats.tokens.items()
    }


def run_cost(stats: Stats, settings: Any) -> dict[str, Any]:
    """Estimated USD per node and in total; None where a model's price is unknown."""
    if not stats.tokens:  # no model was called: the price table (and pydantic models) can wait
        return {"usd": None, "by_node": {}, "estimate": True, "prices_as_of": None}
    from flowkit.llm.usage import PRICES_AS_OF, batch_cost_usd, cost_usd

    prices = getattr(settings, "prices", None)
    batch_prices = getattr(settings, "batch_prices", None)
    by_node: dict[str, float | None] = {}
    online: dict[str, float | None] = {}
    for node, usage in stats.tokens.items():
        model = stats.models.get(node)
        prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
        online[node] = cost_usd(model, prompt, completion, prices) if model else None
        batched = usage.get("batch_prompt_tokens", 0), usage.get("batch_completion_tokens", 0)
        if not any(batched) or not model:
            by_node[node] = online[node]
            continue
        # Calls that went through a batch API at its price, the others at the list price.
        parts = (
            cost_usd(model, prompt - batched[0], completion - batched[1], prices),
            batch_cost_usd(model, *batched, prices, batch_prices),
        )
        by_node[node] = None if None in parts else sum(p for p in parts if p is not None)
    cost: dict[str, Any] = {
        "usd": _total(by_node),
        "by_node": by_node,
        "estimate": True,
        "prices_as_of": PRICES_AS_OF,
    }
    if any("batch_prompt_tokens" in usage for usage in stats.tokens.values()):
        cost["online_usd"] = _total(online)  # what the same calls would have cost online
    return cost


def _total(costs: dict[str, float | None]) -> float | None:
    """The sum, or None when any part is unknown (a partial sum would read as the whole)."""
    known = [c for c in costs.values() if c is not None]
    return sum(known) if known and len(known) == len(costs) else None
