"""What the llm benchmarks share: rows for the built-in `groundedness` flow, and a timed run of
that flow, cache off, through one connection to the local test server.

The benchmarks import this as `common`: Python puts a script's own folder first on sys.path, so
`python benchmarks/x.py` finds it from the repo root and from the benchmarks folder alike.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import flowkit
from flowkit.llm import load_settings, reset_schedulers


def write_rows(path: Path, rows: int) -> Path:
    """``rows`` groundedness rows (a context and an answer each) as JSON lines at ``path``."""
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"context": f"Fact {i}.", "answer": f"Answer {i}."}) + "\n")
    return path


def timed_groundedness(
    data: Path, rows: int, folder: Path, base_url: str, concurrency: int, **limits: Any
) -> float:
    """Seconds to run `groundedness` over ``data`` (``rows`` rows, every one must succeed) with
    the cache off, at ``concurrency``, into folder/run. folder/flowkit.yaml names the one
    connection: ``base_url`` with ``limits`` (max_retries, rpm, …) and the run's concurrency as
    its own in-flight limit, so that limit is never the bottleneck being measured."""
    folder.mkdir()
    connection = {"base_url": base_url, "concurrency": concurrency, **limits}
    # A JSON object is a YAML flow mapping.
    (folder / "flowkit.yaml").write_text(
        f"default_model: flowkit-test\nconnections:\n  local: {json.dumps(connection)}\n"
    )
    reset_schedulers()  # a scheduler left from an earlier run would keep the limit it learned
    start = time.perf_counter()
    result = flowkit.run(
        "groundedness",
        data,
        settings=load_settings(folder, env={}),
        use_cache=False,
        concurrency=concurrency,
        output=folder / "run",
    )
    elapsed = time.perf_counter() - start
    assert result.counts["succeeded"] == rows, result.counts
    return elapsed
