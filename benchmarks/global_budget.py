"""Benchmark (scale-out): one endpoint budget across workers, per backend.

    python benchmarks/global_budget.py [--backends threading loky dask ray] [--rows 64]
        [--rate-rows 60] [--concurrency 8]

For each backend, two workers (a local two-process Dask cluster; a local two-CPU Ray) run a
one-llm-node flow against the test server (in this process), cache off, and the server reports:

- ``in flight``: the most requests it had in flight at once, against an endpoint answering in
  0.1 s without slow start, at ``--concurrency`` (issue 27: 2 × the concurrency before);
- ``rejected``: the share of requests answered 429 by an endpoint limited to 600 requests a
  minute that says so only in its rate-limit headers (issue 27: 29-32% before, 0% locally).

Figures are of one run each; the seconds include starting the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import flowkit
from flowkit.testing.server import LocalServer, serve

JUDGE = """name: judge
inputs: {q: {type: string}}
outputs: {said: ${judge.output}}
nodes:
  - name: judge
    type: llm
    messages: [{role: user, content: "Say something about {{ q }}"}]
    inputs: {q: ${inputs.q}}
"""


@contextmanager
def cluster(backend: str) -> Iterator[dict[str, Any]]:
    """The run options of ``backend`` on two local workers."""
    if backend == "dask":
        from distributed import LocalCluster

        with LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
        ) as found:
            yield {"scheduler": found.scheduler_address}
    elif backend == "ray":
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            yield {}
        finally:
            ray.shutdown()
    else:
        yield {}


def project(folder: Path, server: LocalServer, **connection: Any) -> None:
    conn = {"base_url": server.base_url, "api_key": "k", **connection}
    (folder / "flowkit.yaml").write_text(
        f"default_model: m1\nconnections:\n  c: {json.dumps(conn)}\n"
    )


def one(backend: str, rows: int, concurrency: int, options: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    result = flowkit.run(
        "judge.yaml",
        [{"q": f"q{i}"} for i in range(rows)],
        use_cache=False,
        backend=backend,
        workers=2,
        concurrency=concurrency,
        chunk_size=max(1, rows // 6),
        **options,
    )
    return {"succeeded": result.counts["succeeded"], "seconds": time.monotonic() - t0}


def measure(
    backend: str, folder: Path, rows: int, rate_rows: int, concurrency: int
) -> dict[str, Any]:
    """The two figures of ``backend`` on two local workers, run from ``folder`` (made the
    working directory: the flow and each server's ``flowkit.yaml`` are written there): the most
    requests in flight at ``concurrency``, and the 429s of a 600 rpm endpoint with headers."""
    os.chdir(folder)
    (folder / "judge.yaml").write_text(JUDGE)
    with cluster(backend) as options:
        with serve(latency=0.1) as server:
            project(folder, server, slow_start=False)
            done = one(backend, rows, concurrency, options)
            in_flight = server.stats()["max_in_flight"]
        with serve(rpm=600, limit_window=60.0, rate_headers=True) as server:
            project(folder, server)
            rated = one(backend, rate_rows, concurrency, options)
            status = server.stats()["by_status"]
    return {
        "in_flight": in_flight,
        "seconds": done["seconds"],
        "rejected": status.get("429", 0),
        "sent": sum(status.values()),
        "rate_succeeded": rated["succeeded"],
        "rate_seconds": rated["seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["threading", "loky", "dask", "ray"])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--rate-rows", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    # The clusters here are local: their workers reach the driver on loopback.
    os.environ.setdefault("FLOWKIT_LEASE_BIND", "127.0.0.1")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"two workers each, --concurrency {args.concurrency}; load {os.getloadavg()[0]:.1f}")
        for backend in args.backends:
            got = measure(backend, Path(tmp), args.rows, args.rate_rows, args.concurrency)
            sent, rejected = got["sent"], got["rejected"]
            print(
                f"{backend:>10}: in flight {got['in_flight']} (of {args.rows} rows, "
                f"{got['seconds']:.1f} s); 600 rpm: {rejected} of {sent} "
                f"requests rejected ({100 * rejected / max(1, sent):.0f}%), "
                f"{got['rate_succeeded']} of {args.rate_rows} rows succeeded "
                f"({got['rate_seconds']:.1f} s)"
            )


if __name__ == "__main__":
    main()
