"""What the llm benchmarks share: rows for the built-in `groundedness` flow, and a timed run of
that flow, cache off, through one connection to the local test server.

The benchmarks import this as `common`: Python puts a script's own folder first on sys.path, so
`python benchmarks/x.py` finds it from the repo root and from the benchmarks folder alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

import flowkit
from flowkit.llm import load_settings


def write_rows(path: Path, rows: int) -> Path:
    """``rows`` groundedness rows (a context and an answer each) as JSON lines at ``path``."""
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"context": f"Fact {i}.", "answer": f"Answer {i}."}) + "\n")
    return path


def run_groundedness(
    data: Path,
    folder: Path,
    base_url: str,
    concurrency: int,
    *,
    cache_dir: Path | None = None,
    **limits: Any,
) -> tuple[float, Any]:
    """(seconds, RunResult) of `groundedness` over ``data`` with the cache off, at
    ``concurrency``, into folder/run. folder/flowkit.yaml names the one connection: ``base_url``
    with ``limits`` (max_retries, rpm, …); its in-flight limit is the run's concurrency. What
    flowkit remembers of endpoints between runs lives in ``cache_dir``, by default a new folder
    (folder/cache), so each run finds its endpoint out afresh, as a first run does."""
    folder.mkdir()
    connection = {"base_url": base_url, **limits}
    # A JSON object is a YAML flow mapping.
    (folder / "flowkit.yaml").write_text(
        f"default_model: flowkit-test\nconnections:\n  local: {json.dumps(connection)}\n"
    )
    start = time.perf_counter()
    result = flowkit.run(
        "groundedness",
        data,
        settings=load_settings(folder, env={}),
        use_cache=False,
        cache_dir=cache_dir or folder / "cache",
        concurrency=concurrency,
        output=folder / "run",
    )
    return time.perf_counter() - start, result


def timed_groundedness(
    data: Path,
    rows: int,
    folder: Path,
    base_url: str,
    concurrency: int,
    *,
    cache_dir: Path | None = None,
    **limits: Any,
) -> tuple[float, float, float]:
    """(seconds :func:`run_groundedness` takes, seconds from the first row's start to the last
    row's end, rows per second after the first quarter of rows ended); every one of the
    ``rows`` rows must succeed. The first two differ by start-up (flow loading, imports, the
    run folder) and the end of the run (aggregates, summary); the third is the pace once the
    slow start and the first requests' one-time costs are over."""
    elapsed, result = run_groundedness(
        data, folder, base_url, concurrency, cache_dir=cache_dir, **limits
    )
    assert result.counts["succeeded"] == rows, result.counts
    starts: dict[int, float] = {}
    ends: dict[int, float] = {}
    for record in result.traces():
        line = record.get("line")
        if isinstance(line, int) and record.get("start"):
            starts[line] = min(starts.get(line, record["start"]), record["start"])
            ends[line] = max(ends.get(line, record["end"]), record["end"])
    done = sorted(ends.values())
    quarter = len(done) // 4
    steady = (len(done) - 1 - quarter) / (done[-1] - done[quarter])
    return elapsed, done[-1] - min(starts.values()), steady


def load_average() -> str:
    """The machine's 1-minute load average and core count, printed with every figure: on a
    shared machine the figures mean little without it."""
    one, _, _ = os.getloadavg()
    return f"load {one:.1f} on {os.cpu_count()} cores"


def spread(values: list[float]) -> str:
    """Median and range of repeated runs, e.g. ``0.93 (0.91-0.95)``."""
    ordered = sorted(values)
    return f"{statistics.median(ordered):.2f} ({ordered[0]:.2f}-{ordered[-1]:.2f})"


def judge_body(i: int, prompt: str = "") -> dict[str, Any]:
    """The chat request the raw clients send for row ``i`` (``prompt`` before the row's fact)."""
    content = f"{prompt} Fact {i}." if prompt else f"Fact {i}. Answer {i}."
    return {"model": "flowkit-test", "messages": [{"role": "user", "content": content}]}


def raw_ceiling(base_url: str, rows: int, concurrency: int) -> float:
    """Rows per second a minimal async client (aiohttp, no SDK, no scheduler) gets firing the
    same judge requests at the same server with ``concurrency`` in flight: the ceiling the
    machine and server allow, measured in the same run as flowkit's figure."""

    async def main() -> float:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            todo = iter(range(rows))

            async def worker() -> None:
                for i in todo:
                    body = judge_body(i)
                    while True:  # a 429 (a fault case's) is sent again after its wait alone
                        url = f"{base_url}/chat/completions"
                        async with session.post(url, json=body) as resp:
                            await resp.read()
                            if resp.status != 429:
                                assert resp.status == 200, resp.status
                                break
                            wait = float(resp.headers.get("retry-after-ms", "0")) / 1000
                        if wait > 0:
                            await asyncio.sleep(wait)

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return rows / (time.perf_counter() - start)

    return asyncio.run(main())
