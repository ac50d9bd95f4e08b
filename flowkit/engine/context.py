"""The state of one run that every part of it shares: options, live counts, and the context
node kinds run in. Kept apart from the executor so views and workers can use them alone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowkit.llm.config import Settings


@dataclass(frozen=True)
class RunOptions:
    """How to run, as opposed to what: none of it enters a cache key. The engine's share of a
    run's options (``flowkit.runs.config.RunConfig.run_options``); fixed for the whole run."""

    concurrency: int = 16
    use_cache: bool = True
    refresh: frozenset[str] = frozenset()
    timeout: float | None = None
    """Per model request, in seconds; None keeps the connection's setting."""


BATCHED = ("batch_prompt_tokens", "batch_completion_tokens")
"""Usage keys of the tokens that went through a batch API, priced at its price."""


@dataclass
class Stats:
    """Live counts, read by the progress display and written to run.json."""

    rows: int = 0
    succeeded: int = 0
    failed: int = 0
    bad_input: int = 0
    invalid: int = 0
    """Rows with an output `result` of 'invalid' (a judge answer that could not be read)."""
    node_runs: int = 0
    cache_hits: int = 0
    node_failures: int = 0
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    waiting: str = ""
    """What the rows wait on besides themselves, for the progress display (a run's batches)."""
    cached_nodes: dict[str, int] = field(default_factory=dict)
    """Per top-level node, the rows whose result came from the cache (a cache hit, or a timed
    sub-flow none of whose nodes ran): a run can say which replies are not fresh."""

    def add_usage(self, node: str, usage: dict[str, int], model: str | None = None) -> None:
        acc = self.tokens.setdefault(
            node, {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "calls": 0}
        )
        if model:
            self.models[node] = model
        for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
            acc[k] += int(usage.get(k) or 0)
        for k in BATCHED:  # the share of them that came through a batch API (flowkit.batch)
            if usage.get(k):
                acc[k] = acc.get(k, 0) + int(usage[k])
        acc["calls"] += 1

    def merge(self, other: Stats) -> None:
        """Add a worker's counts (see backends) to these."""
        for name in (
            "rows",
            "succeeded",
            "failed",
            "bad_input",
            "invalid",
            "node_runs",
            "cache_hits",
            "node_failures",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.models.update(other.models)
        for node, n in other.cached_nodes.items():
            self.cached_nodes[node] = self.cached_nodes.get(node, 0) + n
        for node, usage in other.tokens.items():
            acc = self.tokens.setdefault(node, dict.fromkeys(usage, 0))
            for k, v in usage.items():
                acc[k] = acc.get(k, 0) + v

    def token_totals(self) -> dict[str, int]:
        keys = ("prompt_tokens", "completion_tokens", "total_tokens", "calls")
        return {k: sum(t[k] for t in self.tokens.values()) for k in keys}


class RunContext:
    """What node kinds may use while running: settings, threads, the shared stats."""

    def __init__(
        self,
        options: RunOptions,
        settings: Settings | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        self.options = options
        self.settings = settings
        self.environment = environment or {}
        """The variables the run sets (RunConfig.environment): in its python nodes' keys."""
        self.threads = ThreadPoolExecutor(max_workers=max(4, options.concurrency))
        self.timeout = options.timeout
        self.flow_name = ""
        """The flow whose node is being prepared, for configuration messages."""
        self.batchers: dict[int, Any] = {}
        """Per embedding node (by its ``BoundNode``'s id, so per run), the batcher collecting
        texts across rows."""

    def model_settings(self) -> Settings:
        """The run's model settings, loaded before ``prepare`` for kinds that call an endpoint
        (``calls_endpoint``); a kind that reads them without saying so is told here."""
        if self.settings is None:
            raise RuntimeError(
                "no model settings were loaded for this run: a kind that calls a model endpoint "
                "says so with calls_endpoint = True"
            )
        return self.settings
