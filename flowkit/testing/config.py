"""The test server's configuration: everything it does that is not written into the prompt.

A plain dataclass, checked on construction, so the same object serves ``serve()`` in-process,
``--config-json`` on the command line and live changes through ``POST /config``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from flowkit.testing.charges import RULES

FAULT_KINDS = ("429", "500", "timeout", "malformed", "garbage")
# Called on the server's event loop with the request body; returning None falls through.
Hook = Callable[[dict[str, Any]], Any]
"""Gets the request body; returns the reply text, None for the default, or an aiohttp
Response to send as it is (awaitables of these too)."""


@dataclass
class ServerConfig:
    """Everything the server does that is not written into the prompt; safe to change live."""

    host: str = "127.0.0.1"
    port: int = 0
    latency: float = 0.0
    jitter: float = 0.0  # extra uniform 0..jitter seconds, drawn from the per-attempt RNG
    models: list[str] = field(
        default_factory=lambda: ["flowkit-test", "gpt-4o-mini", "text-embedding-3-small"]
    )
    rules: list[tuple[str, str]] = field(default_factory=list)  # (regex on last user msg, reply)
    hook: Hook | None = None
    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    rate_garbage: float = 0.0
    retry_after: float = 1.0
    timeout_delay: float = 30.0
    rpm: int = 0  # requests per limit_window (0: unlimited), answered with 429 + Retry-After
    tpm: int = 0  # tokens per limit_window (prompt words at admission, completion words after)
    limit_window: float = 60.0  # the span rpm/tpm count over; a few seconds in fast tests
    # Seconds (of a 60 s window, scaled with limit_window) of the tpm budget that may arrive at
    # once; rpm always holds 1 s (Azure evaluates request rates over 1 or 10 s; OpenAI's guide:
    # limits "may be quantized", 60,000/minute as 1,000/second). 1.0, the strictest reading
    # (OpenAI's quantizing applied to tokens); 60.0 is Azure's published TPM rule (a running
    # count per minute); 10.0 lies between.
    token_slice: float = 1.0
    rate_headers: bool = False  # send x-ratelimit-* (OpenAI's names and formats) on replies
    # How a chat request is charged to tpm (flowkit.testing.charges): "usage" (prompt words on
    # arrival, completion words after), "prompt_plus_max" (Azure: the prompt plus max_tokens
    # x n on arrival) or "max_of" (OpenAI: max_tokens x n or characters / 4, the larger).
    token_charge: str = "usage"
    seed: int = 0
    api_key: str | None = None
    embedding_dim: int = 64
    record_requests: bool = False  # keep each chat request's body (LocalServer.recorded())
    batch_delay: float = 0.0  # seconds from a batch's creation to its end (see testing.batches)
    batch_fail_rate: float = 0.0  # share of batch lines answered in the error file with a 500
    batch_expiring: int = 0  # the first N batches created (since a reset) expire
    batch_expire_done: float = 0.5  # the share of an expiring batch's lines finished first
    batch_create_lost: int = 0  # the first N batch creates make the batch but answer a 500
    batch_max_requests: int = 50_000  # requests per batch input file (OpenAI's limit)
    batch_max_bytes: int = 200 * 2**20  # bytes per batch input file (OpenAI's limit)

    def __post_init__(self) -> None:
        problems: list[str] = []
        numbers: tuple[str, ...] = (
            "latency",
            "jitter",
            "retry_after",
            "timeout_delay",
            "rpm",
            "tpm",
        )
        numbers += ("batch_delay", "batch_expiring", "batch_max_requests", "batch_max_bytes")
        numbers += ("batch_create_lost",)
        for name in ("batch_fail_rate", "batch_expire_done"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not 0 <= value <= 1
            ):
                problems.append(f"{name} is a share and must be in 0..1, got {value!r}")
        if (
            isinstance(self.token_slice, bool)
            or not isinstance(self.token_slice, (int, float))
            or not 0 < self.token_slice <= 60
        ):
            problems.append(f"token_slice must be in (0, 60] seconds, got {self.token_slice!r}")
        if not isinstance(self.limit_window, (int, float)) or self.limit_window <= 0:
            problems.append(f"limit_window must be a number > 0, got {self.limit_window!r}")
        for name in (*numbers, *(f"rate_{kind}" for kind in FAULT_KINDS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                problems.append(f"{name} must be a number >= 0, got {value!r}")
            elif name.startswith("rate_") and value > 1:
                problems.append(f"{name} is a probability and must be <= 1, got {value!r}")
        if not problems and sum(self.fault_rates().values()) > 1:
            problems.append("the fault rates add up to more than 1")
        if self.token_charge not in RULES:
            problems.append(f"token_charge must be one of {list(RULES)}, got {self.token_charge!r}")
        if not self.models or not all(isinstance(m, str) and m for m in self.models):
            problems.append(f"models must be a non-empty list of names, got {self.models!r}")
        if not isinstance(self.embedding_dim, int) or not 1 <= self.embedding_dim <= 4096:
            problems.append(f"embedding_dim must be an int in 1..4096, got {self.embedding_dim!r}")
        for rule in self.rules:
            if (
                not isinstance(rule, (list, tuple))
                or len(rule) != 2
                or not all(isinstance(part, str) for part in rule)
            ):
                problems.append(f"a rule must be a (regex, reply) pair of strings, got {rule!r}")
                continue
            try:
                re.compile(rule[0])
            except re.error as exc:
                problems.append(f"rule regex {rule[0]!r} does not compile: {exc}")
        if problems:
            raise ValueError("invalid ServerConfig: " + "; ".join(problems))
        self.rules = [tuple(rule) for rule in self.rules]  # type: ignore[misc]  # JSON gives lists

    def fault_rates(self) -> dict[str, float]:
        return {kind: getattr(self, f"rate_{kind}") for kind in FAULT_KINDS}

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able part: a hook is live Python and cannot leave the process."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "hook"}

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: ServerConfig | None = None) -> ServerConfig:
        known = {f.name for f in fields(cls)} - {"hook"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ServerConfig field(s) {unknown}; known: {sorted(known)}")
        return replace(base or cls(), **data)
