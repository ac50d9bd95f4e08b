"""Run folders: `runs/<flow>-<YYYYmmdd-HHMMSS>-<id>/` with run.json, outputs.jsonl, metrics.json
and traces.jsonl — plain files a person and a program can both read.

Rows finish out of order; outputs.jsonl is written in input order through a small reorder buffer,
traces as they come. Files are flushed at least every second so an interrupted run keeps what it
finished.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flowkit.canonical import dumps, loads
from flowkit.errors import UsageError
from flowkit.trace import NodeRecord, encode

RUN_FORMAT = "flowkit.run"
RUN_VERSION = 1
RUNNING, COMPLETED, INTERRUPTED, FAILED = "running", "completed", "interrupted", "failed"


def new_run_dir(root: Path, flow_name: str, name: str | None = None) -> Path:
    if name:
        path = root / name
        if path.exists() and any(path.iterdir()):
            raise UsageError(
                f"run folder {str(path)!r} already exists and is not empty",
                hint="choose another --name, or remove the folder",
            )
        return path
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{flow_name}-{stamp}-{secrets.token_hex(3)}"


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat() if ts else None


def write_json(path: Path, value: Any) -> None:
    """Write atomically, so a reader (or a crash) never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n", "utf-8")
    os.replace(tmp, path)


class RunWriter:
    """Owns the files of one run while it executes."""

    def __init__(self, directory: Path, info: dict[str, Any], *, flush_seconds: float = 1.0):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.run_id = directory.name
        self.info = {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "run_id": self.run_id,
            **info,
            "status": RUNNING,
            "pid": os.getpid(),
            "started": iso(time.time()),
        }
        self._outputs = open(directory / "outputs.jsonl", "wb")  # noqa: SIM115 - held for the run
        self._traces = open(directory / "traces.jsonl", "wb")  # noqa: SIM115
        self._next = 0
        self._buffer: dict[int, bytes] = {}
        self._flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self.write_info()

    def write_info(self, **updates: Any) -> None:
        self.info.update(updates)
        write_json(self.dir / "run.json", self.info)

    def trace(self, record: NodeRecord) -> None:
        self._traces.write(encode(record) + b"\n")

    def trace_bytes(self, line: bytes) -> None:
        """A trace line already encoded (by a worker process)."""
        self._traces.write(line + b"\n")

    def row(self, index: int, record: dict[str, Any]) -> None:
        """Queue a finished row; rows reach outputs.jsonl in input order."""
        self._buffer[index] = dumps(record) + b"\n"
        while self._next in self._buffer:
            self._outputs.write(self._buffer.pop(self._next))
            self._next += 1

    def maybe_flush(self) -> bool:
        if time.monotonic() - self._last_flush < self._flush_seconds:
            return False
        self.flush()
        return True

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        self._outputs.flush()
        self._traces.flush()

    def close(self, status: str, metrics: dict[str, Any] | None, **updates: Any) -> None:
        # Rows still held for ordering (an earlier row never finished) are written anyway.
        for index in sorted(self._buffer):
            self._outputs.write(self._buffer.pop(index))
        self.flush()
        self._outputs.close()
        self._traces.close()
        if metrics is not None:
            write_json(self.dir / "metrics.json", metrics)
        self.write_info(status=status, ended=iso(time.time()), **updates)


# -- reading ---------------------------------------------------------------------------------
def resolve_run_dir(run: str | os.PathLike[str], root: Path = Path("runs")) -> Path:
    """A run folder given as a path, or as a name inside ``root``; a unique prefix is enough."""
    path = Path(run)
    if (path / "run.json").is_file():
        return path
    candidates = sorted(p for p in root.glob(f"{run}*") if (p / "run.json").is_file())
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates[:5])
        raise UsageError(f"run {str(run)!r} is ambiguous: {names}", hint="give more of the name")
    raise UsageError(
        f"no run folder {str(run)!r} (looked for run.json there and in {root}/)",
        hint="`flowkit runs` lists the runs",
    )


def read_run_info(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text("utf-8"))


def read_metrics(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "metrics.json"
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def iter_jsonl(path: Path) -> Any:
    """Records of a JSONL file; a torn last line (a run killed mid-write) is skipped."""
    if not path.is_file():
        return
    with open(path, "rb") as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                yield loads(raw)
            except Exception:
                continue


def read_outputs(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {rec["line"]: rec for rec in iter_jsonl(run_dir / "outputs.jsonl")}
