"""The model-calling layer every ``llm`` node goes through.

``load_settings`` merges environment, ``flowkit.yaml`` and CLI options; ``Settings.check``
validates a node's configuration before any row runs and returns its ``Endpoint`` (``endpoint``:
a connection, its limits and prices; ``projectfile``: reading ``flowkit.yaml``);
``chat`` / ``embed`` call it through the current run's ``LlmSession`` (``session``: its
schedulers, clients, endpoint memory and usage, found through the ``session.current`` context
variable the run sets; outside a run, a default session): one client per endpoint
(``clients``; a chat request is built once per shape and reused, ``prepared``, on the SDK's
private hooks that ``hooks`` checks first, else through its public API) and one
``Scheduler`` per endpoint and model (adaptive concurrency, RPM/TPM budgets, retries;
``stats``: what it counts); ``UsageTracker`` sums tokens and costs.
Runs in one process share each endpoint's declared ``rpm`` / ``tpm`` through a
``SharedEndpoints`` (``shared``), which sessions join by default. A scale-out run's workers
draw from the driver's schedulers (``leases``: a worker's session leases each attempt;
``leaseserver``: the driver serves them) and run with the driver's settings and their own
keys (``handed``).
The scheduler (admission, retries, early stop) composes ``pacing`` (request and token paces,
the opening, learning limits from headers and 429s; ``memory`` keeps what it learned between
runs, per endpoint and model, merged with what other runs saved; ``successes``: the success
rate a cut measures, and how far a cut goes; ``booked``: what the token pace booked for
requests not yet answered, so each reading of what is left re-syncs it), ``stalls`` (the
learned stall deadline), ``budget`` (token buckets),
``ratelimits`` (header parsing), ``charging`` (what a request costs a token budget, counted as
the endpoint counts it: the connection's ``token_charge`` rule; ``learner`` corrects it from
the headers) and ``retry`` (what a failure means).

Names are imported on first use (PEP 562): ``flowkit.llm.usage`` prices tokens for every run,
and must not load the openai SDK (most of a python-only run's start-up) on the way. ``sdk`` is
where the SDK is imported, the packages of its ``openai.types`` and ``openai.lib`` trees and of
its http core run on first use (a chat request needs a few of their modules) and without
aiohttp: an endpoint's first requests go on the SDK's httpx, and a second request starts
aiohttp's import on a thread (``clients``).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Attempted": "stats",
    "BUILTIN_PRICES": "usage",
    "ChatResult": "client",
    "Connection": "endpoint",
    "EmbedResult": "client",
    "Endpoint": "endpoint",
    "Limits": "endpoint",
    "LlmSession": "session",
    "PRICES_AS_OF": "usage",
    "PROJECT_FILE": "config",
    "Price": "endpoint",
    "ProjectFile": "projectfile",
    "Scheduler": "scheduler",
    "SchedulerStats": "stats",
    "Settings": "config",
    "SharedEndpoints": "shared",
    "Tally": "usage",
    "UsageTracker": "usage",
    "aclose_clients": "clients",
    "all_schedulers": "session",
    "chat": "client",
    "clients_created": "clients",
    "cost_usd": "usage",
    "current_session": "session",
    "default_session": "session",
    "embed": "client",
    "get_client": "clients",
    "load_settings": "config",
    "parse_retry_after": "retry",
    "price_for": "usage",
    "reset_default_session": "session",
    "run_session": "session",
    "scheduler_for": "session",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'flowkit.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"flowkit.llm.{module}"), name)
    globals()[name] = value
    return value
