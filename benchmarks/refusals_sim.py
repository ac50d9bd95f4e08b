"""Pacing against simulated endpoints without rate-limit headers: scattered 429s and limiters.

    python benchmarks/refusals_sim.py [--seeds 5] [--only TEXT] [--raw]

flowkit's ``Scheduler`` (the request path without HTTP) against endpoints simulated in virtual
time (``tests.llm.fakes``: ``VirtualTime``, ``SimulatedEndpoint``): every reply takes 200 ms;
*scattered* 429s refuse a share of requests at random 5 ms after they arrive, each asking for a
``Retry-After``; a *limiter* lets a slice of its per-minute budget through at once (1 s by
default) and refuses the rest, 5 ms after arrival, with the wait until it has room. A run's
seconds take no real time, so the figures are the same on a loaded machine. Each case prints
the run's time (median and range over the seeds), the ideal (rows over the lower of concurrency
/ latency and the limit), the ideal over the median, and the share of requests refused per seed.

With ``stagger``, the first ``concurrency`` requests are handed over that many seconds apart,
as the executor's workers build them (about a millisecond each), against an endpoint that
refuses within ``refused_after`` (the local test server: about a millisecond).

``--raw`` runs a client without a scheduler instead: ``concurrency`` workers, each waiting out
its own 429's ``Retry-After``, the best a client can do against scattered 429s (against a
limiter, it sends at the limit's refusals' pace). Issue 31's review case is the first line:
200 rows at 32 in flight, 10% of requests refused with ``Retry-After: 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowkit.llm.endpoint import Limits
from flowkit.llm.scheduler import Scheduler
from tests.llm.fakes import SimulatedEndpoint, VirtualTime

LATENCY = 0.2
"""Seconds a reply takes."""

CASES: list[dict[str, Any]] = [
    {"scattered": 0.1},
    {"scattered": 0.1, "c": 16},
    {"scattered": 0.1, "stagger": 0.001, "refused_after": 0.001},
    {"scattered": 0.4},
    {"scattered": 0.1, "retry_after": 0.0},
    {"scattered": 0.1, "rows": 2000},
    {"scattered": 0.02, "rows": 2000},
    {"scattered": 0.05, "c": 16},
    {"scattered": 0.1, "refused_after": 0.2},
    {"rpm": 600, "rows": 300},
    {"rpm": 600, "rows": 300, "c": 16},
    {"rpm": 600, "rows": 300, "stagger": 0.001},
    {"rpm": 1200, "rows": 300, "c": 16},
    {"rpm": 3000, "rows": 600, "c": 16, "slice_s": 2.0},
    {"rpm": 600, "rows": 300, "slice_s": 10.0},
    {"rpm": 3000, "rows": 1000, "c": 16},
    {"rpm": 600, "rows": 1500},
    {"rpm": 600, "rows": 300, "scattered": 0.05},
    {"rpm": 3000, "rows": 1000, "c": 16, "scattered": 0.1},
]


def simulate(case: dict[str, Any], seed: int, raw: bool) -> tuple[float, float]:
    """(seconds the run took, share of requests refused)."""
    clock = VirtualTime()
    rows, concurrency = case.get("rows", 200), case.get("c", 32)
    limits = Limits(concurrency=concurrency, max_retries=50, backoff_base=0.0, backoff_max=0.0)
    url = "http://127.0.0.1:9/v1"
    sched = Scheduler(limits, name="sim", url=url, clock=clock, sleep=clock.sleep)
    stagger = case.get("stagger", 0.0)
    shape = {k: v for k, v in case.items() if k not in ("rows", "c", "stagger")}
    endpoint = SimulatedEndpoint(clock, latency=LATENCY, seed=seed, **shape)

    async def one(slots: asyncio.Semaphore, i: int) -> None:
        await clock.sleep(min(i, concurrency) * stagger)  # as the executor's workers build them
        if not raw:
            await sched.run(endpoint.call)
            return
        async with slots:
            while True:
                try:
                    await endpoint.call()
                    return
                except Exception as exc:  # a 429: wait out its own Retry-After
                    wait = float(exc.response.headers["retry-after-ms"]) / 1000  # type: ignore[attr-defined]
                    await clock.sleep(wait)

    async def body() -> None:
        slots = asyncio.Semaphore(concurrency)
        await asyncio.gather(*(one(slots, i) for i in range(rows)))

    asyncio.run(clock.drive(body()))
    return clock.now, endpoint.refused / (endpoint.refused + endpoint.ok)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--only", default="", help="run the cases whose text contains this")
    parser.add_argument("--raw", action="store_true", help="a client without a scheduler")
    args = parser.parse_args()
    for case in CASES:
        if args.only not in str(case):
            continue
        runs = [simulate(case, seed, args.raw) for seed in range(args.seeds)]
        times = sorted(t for t, _ in runs)
        rows, concurrency = case.get("rows", 200), case.get("c", 32)
        limit = min(concurrency / LATENCY, case.get("rpm", math.inf) / 60.0)
        ideal, median = rows / limit, statistics.median(times)
        refused = ", ".join(f"{r:.1%}" for _, r in sorted(runs, key=lambda run: run[1]))
        who = "raw client" if args.raw else "flowkit"
        print(
            f"{who} {case}: {median:.1f} s ({times[0]:.1f}-{times[-1]:.1f}), ideal {ideal:.1f} s, "
            f"{ideal / median:.2f} of the limit; refused {refused}",
            flush=True,
        )


if __name__ == "__main__":
    main()
