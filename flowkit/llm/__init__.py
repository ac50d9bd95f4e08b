"""The model-calling layer every ``llm`` node goes through.

``load_settings`` merges environment, ``flowkit.yaml`` and CLI options; ``Settings.check``
validates a node's configuration before any row runs and returns its ``Endpoint``;
``chat`` / ``embed`` call it through one shared client and one ``Scheduler`` per endpoint
(adaptive concurrency, RPM/TPM budgets, retries); ``UsageTracker`` sums tokens and costs.
"""

from __future__ import annotations

from flowkit.llm.client import (
    ChatResult,
    EmbedResult,
    aclose_clients,
    chat,
    clients_created,
    embed,
    get_client,
)
from flowkit.llm.config import (
    PROJECT_FILE,
    Connection,
    Endpoint,
    Limits,
    Price,
    ProjectFile,
    Settings,
    load_settings,
)
from flowkit.llm.retry import parse_retry_after
from flowkit.llm.scheduler import (
    Attempted,
    Scheduler,
    SchedulerStats,
    all_schedulers,
    reset_schedulers,
    scheduler_for,
)
from flowkit.llm.usage import (
    BUILTIN_PRICES,
    PRICES_AS_OF,
    Tally,
    UsageTracker,
    cost_usd,
    price_for,
)

__all__ = [
    "BUILTIN_PRICES",
    "PRICES_AS_OF",
    "PROJECT_FILE",
    "Attempted",
    "ChatResult",
    "Connection",
    "EmbedResult",
    "Endpoint",
    "Limits",
    "Price",
    "ProjectFile",
    "Scheduler",
    "SchedulerStats",
    "Settings",
    "Tally",
    "UsageTracker",
    "aclose_clients",
    "all_schedulers",
    "chat",
    "clients_created",
    "cost_usd",
    "embed",
    "get_client",
    "load_settings",
    "parse_retry_after",
    "price_for",
    "reset_schedulers",
    "scheduler_for",
]
