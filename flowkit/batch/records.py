"""A run's batches on disk: ``batches.jsonl`` in its run folder, appended to, never rewritten.

Each batch is recorded in three steps: ``submit`` (its nonce, input file and custom_ids) BEFORE it
is created, ``created`` (the provider's batch id) right after, ``done`` (its final status) once
collected. A process killed between creating a batch and recording its id leaves a ``submit``
without ``created``; the next process finds the batch by the nonce in its metadata
(``flowkit_nonce``), so no batch is ever lost, and no call in one is paid for again.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FILE = "batches.jsonl"
NONCE_KEY = "flowkit_nonce"


@dataclass
class BatchRecord:
    """One batch as the run folder knows it."""

    nonce: str
    connection: str
    input_file_id: str
    custom_ids: list[str]
    batch_id: str | None = None
    status: str | None = None
    submitted_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class BatchRecords:
    """``batches.jsonl`` of one run folder."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / FILE

    def read(self) -> list[BatchRecord]:
        """Every batch recorded, in submission order (a torn last line is skipped)."""
        if not self.path.is_file():
            return []
        found: dict[str, BatchRecord] = {}
        for raw in self.path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(raw)
                nonce = event.get("nonce")
                if event.get("event") == "submit":
                    found[nonce] = BatchRecord(
                        nonce,
                        event["connection"],
                        event["input_file_id"],
                        list(event["custom_ids"]),
                        submitted_at=event.get("at", 0.0),
                    )
                elif nonce in found and event.get("event") == "created":
                    found[nonce].batch_id = event["batch_id"]
                elif nonce in found and event.get("event") == "done":
                    found[nonce].status = event["status"]
                    found[nonce].extra = {k: event[k] for k in ("counts",) if k in event}
            except (ValueError, AttributeError, KeyError, TypeError):
                # A line cut by a kill (its batch is found again by its nonce), or one damaged
                # by hand: skipped, as a line the file does not hold.
                continue
        return list(found.values())

    def _append(self, event: dict[str, Any]) -> None:
        # One write per line and an fsync: the record must be on disk before the batch exists.
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(event) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def submitting(self, record: BatchRecord) -> None:
        self._append(
            {
                "event": "submit",
                "nonce": record.nonce,
                "connection": record.connection,
                "input_file_id": record.input_file_id,
                "custom_ids": record.custom_ids,
                "at": time.time(),
            }
        )

    def created(self, nonce: str, batch_id: str) -> None:
        self._append({"event": "created", "nonce": nonce, "batch_id": batch_id})

    def done(self, nonce: str, status: str, counts: dict[str, int]) -> None:
        self._append({"event": "done", "nonce": nonce, "status": status, "counts": counts})
