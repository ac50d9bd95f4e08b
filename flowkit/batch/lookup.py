"""Looking a batch up at the provider: the one a record's nonce names (created by a process
that died before writing its id down), and what the provider says of a batch that failed."""

from __future__ import annotations

from typing import Any

from flowkit.batch.records import NONCE_KEY, BatchRecord, BatchRecords

TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
API_RETRIES = 5
"""The SDK's own retries (with its backoff) for the batch API's calls, which flowkit's
scheduler does not pace: a transient 5xx while a batch runs for hours must not lose the run."""
CLOCK_SKEW = 3600.0
"""Seconds this machine's clock (a record's time) may be ahead of the provider's (a batch's
``created_at``) without a batch looked for by its nonce being missed, and paid for twice."""


def why_failed(batch: Any) -> str:
    """What the provider says of a batch that failed (at validation, as ``token_limit_exceeded``
    when the queue of a model is full): the reason each of its calls failed, to be read."""
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    said = [f"{e.code or 'error'}: {e.message or 'no message'}" for e in errors]
    return f" ({'; '.join(said)})" if said else ""


async def find_by_nonce(client: Any, record: BatchRecord, records: BatchRecords) -> str | None:
    """The id of the batch created from ``record`` by a process that died before writing it
    down (the nonce is in the batch's metadata), now written down; None when it was never
    created."""
    async for batch in client.batches.list(limit=100):
        if (batch.metadata or {}).get(NONCE_KEY) == record.nonce:
            records.created(record.nonce, batch.id)
            return str(batch.id)
        if batch.created_at < record.submitted_at - CLOCK_SKEW:
            break  # newest first: older batches cannot be this one
    return None
