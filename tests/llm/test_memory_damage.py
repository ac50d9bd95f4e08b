"""endpoints.json is read back as damaged until parsed: an entry that is not what flowkit writes
(a hand edit, a disk fault, another version) costs a notice, never a row, a stall or the run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import write_jsonl

DAMAGE: dict[str, Any] = {
    "huge-window": {"window": 1e999},
    "tiny-pace": {"window": None, "rpm": 1e-300},
    "text-window": {"window": "sixteen"},
    "not-a-dict": "garbage",
    "no-time": {"at": None},
}


@pytest.mark.slow  # two runs each
@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_a_damaged_entry_costs_a_notice_not_the_run(
    llm_server: LocalServer, workdir: Path, damage: str
) -> None:
    rows = write_jsonl(
        workdir / "rows.jsonl", [{"context": f"F {i}", "answer": f"A {i}"} for i in range(60)]
    )
    cache = workdir / "cache"
    # Capped without headers, so the first run's opening burst is cut and a pace is kept.
    llm_server.configure(rpm=600, limit_window=3.0, retry_after=0.2)
    try:
        flowkit.run(
            "groundedness", rows, cache_dir=cache, use_cache=False, name="first", concurrency=16
        )
    finally:
        llm_server.configure(rpm=0, limit_window=60.0, retry_after=1.0)
    memory = cache / "endpoints.json"
    data = json.loads(memory.read_text())
    assert data["endpoints"], "the first run left nothing to remember"
    for key, entry in data["endpoints"].items():
        change = DAMAGE[damage]
        data["endpoints"][key] = {**entry, **change} if isinstance(change, dict) else change
    memory.write_text(json.dumps(data))
    result = flowkit.run(
        "groundedness", rows, cache_dir=cache, use_cache=False, name="second", timeout=20
    )
    assert result.status == "completed"
    assert result.counts["failed"] == 0
    assert (
        result.info["notices"].count(
            f"ignored 1 damaged entry in {memory} (those endpoints are found out afresh)"
        )
        == 1
    )
    # The file is sound again: the damaged entry was replaced by what this run found.
    again = json.loads(memory.read_text())["endpoints"]
    assert all(isinstance(e, dict) and isinstance(e.get("at"), float) for e in again.values())


def _zero(memory: Path) -> None:
    memory.unlink()
    memory.symlink_to("/dev/zero")  # read whole, it ran the run out of memory


def _fifo(memory: Path) -> None:
    memory.unlink()
    os.mkfifo(memory)  # opened for reading, it blocked the run for ever


def _deep(memory: Path) -> None:
    memory.write_text("[" * 200_000)  # RecursionError from json


def _huge(memory: Path) -> None:
    memory.write_text(json.dumps({"version": 1, "pad": " " * (5 * 2**20)}))


@pytest.mark.slow  # two runs each
@pytest.mark.parametrize(
    "damage", [_zero, _fifo, _deep, _huge], ids=["zero", "fifo", "deep", "huge"]
)
def test_a_damaged_file_costs_a_notice_not_the_run(
    llm_server: LocalServer, workdir: Path, damage: Any
) -> None:
    rows = write_jsonl(workdir / "rows.jsonl", [{"context": "F", "answer": "A"}] * 40)
    cache = workdir / "cache"
    # Capped without headers, so each run's opening burst is cut and a pace is kept.
    llm_server.configure(rpm=600, limit_window=3.0, retry_after=0.2)
    try:
        flowkit.run(
            "groundedness", rows, cache_dir=cache, use_cache=False, name="first", concurrency=16
        )
        memory = cache / "endpoints.json"
        damage(memory)
        result = flowkit.run(
            "groundedness",
            rows,
            cache_dir=cache,
            use_cache=False,
            name="second",
            timeout=20,
            concurrency=16,
        )
    finally:
        llm_server.configure(rpm=0, limit_window=60.0, retry_after=1.0)
    assert result.status == "completed"
    assert result.counts["failed"] == 0
    notice = (
        f"ignored {memory}: not a readable endpoints file (endpoints are found out afresh; the "
        "run replaces it)"
    )
    assert result.info["notices"].count(notice) == 1
    assert memory.is_file() and not memory.is_symlink()
    assert json.loads(memory.read_text())["endpoints"]
