"""``flowkit batches RUN``: the batches a run's folder records, with their status at the
provider now; with ``cancel`` the unfinished ones are cancelled (never implicitly: a Ctrl-C
leaves them running, for a resume to collect)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flowkit.batch.lookup import API_RETRIES, TERMINAL, find_by_nonce
from flowkit.batch.records import BatchRecords


def batch_table(run_dir: Path, *, cancel: bool = False) -> list[dict[str, Any]]:
    """One dict per recorded batch: id, connection, calls, status and request counts."""
    from flowkit.llm.config import load_settings
    from flowkit.llm.session import LlmSession, using

    records = BatchRecords(run_dir).read()
    if not records:
        return []
    settings = load_settings()
    session = LlmSession(shared=None)
    try:
        with using(session):
            return asyncio.run(_look(records, run_dir, settings, cancel))
    finally:
        session.close()


async def _look(
    records: list[Any], run_dir: Path, settings: Any, cancel: bool
) -> list[dict[str, Any]]:
    import openai

    from flowkit.llm.session import current_session

    rows = []
    for record in records:
        endpoint = settings.check("batches", run_dir.name, record.connection, "batch")
        client = await current_session().clients.get(endpoint)
        client = client.with_options(max_retries=API_RETRIES)
        if record.batch_id is None:
            record.batch_id = await find_by_nonce(client, record, BatchRecords(run_dir))
        row: dict[str, Any] = {
            "batch": record.batch_id,
            "connection": record.connection,
            "calls": len(record.custom_ids),
            "status": "never created",
            "completed": 0,
            "failed": 0,
        }
        if record.batch_id is not None:
            try:
                batch = await client.batches.retrieve(record.batch_id)
            except openai.NotFoundError:  # another key or project, a provider that forgot it
                row["status"] = "not found"
                rows.append(row)
                continue
            if cancel and batch.status not in TERMINAL and batch.status != "cancelling":
                batch = await client.batches.cancel(record.batch_id)
            counts = batch.request_counts
            row.update(
                status=batch.status,
                completed=counts.completed if counts else 0,
                failed=counts.failed if counts else 0,
            )
        rows.append(row)
    await current_session().clients.aclose()
    return rows
