"""Where a run's results go: the ``RunSink`` protocol, all the engine needs of a run folder.

The engine writes rows and trace records through it and never imports ``flowkit.runs``, which
owns the implementations: ``RunWriter`` (the run folder) and the scale-out worker's
``MemoryWriter`` (kept for the trip back to the driver). The behaviour the engine relies on is
pinned by ``tests/runs/test_run_sink_contract.py``, run over each: every record traced is read
back as the same typed record, in the order traced; every row given is read back by its index;
rows and traces are JSON.
"""

from __future__ import annotations

from typing import Any, Protocol

from flowkit.engine.records import NodeRecord


class RunSink(Protocol):
    """Receives one run's trace records and finished rows."""

    @property
    def run_id(self) -> str:
        """The run's id, written into every trace record."""
        ...

    @property
    def info(self) -> dict[str, Any]:
        """The run's record (run.json's fields): what the engine adds to it while rows run
        (``notices``, ``missing_keys``) is kept when the run closes."""
        ...

    def trace(self, record: NodeRecord) -> None:
        """Keep one node's record for one row, after those traced before it."""
        ...

    def row(self, index: int, record: dict[str, Any]) -> None:
        """Keep a finished row (input row ``index``); rows may come in any order."""
        ...

    def maybe_flush(self) -> bool:
        """Write out what is held if it is time to; whether it did (the cache then flushes
        too, so a row on disk always has its cache entries)."""
        ...
