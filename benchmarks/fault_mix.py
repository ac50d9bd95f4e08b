"""Benchmark (fault mix): throughput of an llm flow on an endpoint that fails in every way at once.

    python benchmarks/fault_mix.py [--rows 300] [--concurrency 32] [--runs 3]

The test server (a child process) answers after 5 ms, with 15% 429s carrying `Retry-After: 0`,
5% 500s, 2% replies that stall for 20 s and 3% garbage bodies. `groundedness` runs over the rows
with the cache off. Prints rows/s, whether every row is accounted for (in outputs.jsonl, ok or
failed), whether the scored rows equal a fault-free run's (a garbage reply is a 200 with a
well-formed completion of nonsense, so its row has no score, as with a real judge), the 429s
taken as overload, the stalled attempts cut at the learned deadline, and a ceiling measured in
the same run: a minimal aiohttp client firing the same requests at a fault-free server at the
same concurrency.
Median (range) over the runs, with the machine's load. Target: >= 50 rows/s, all rows
accounted for, scores equal.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import load_average, raw_ceiling, run_groundedness, spread, write_rows

import flowkit.runs.job
from flowkit.llm.session import LlmSession, run_session
from flowkit.testing.server import ServerConfig, serve_subprocess

sessions: list[LlmSession] = []
"""Each run's model-calling session, kept for its schedulers' counters after the run."""


@contextlib.contextmanager
def _kept_session(*args: Any, **kwargs: Any) -> Iterator[LlmSession]:
    with run_session(*args, **kwargs) as session:
        sessions.append(session)
        yield session


flowkit.runs.job.run_session = _kept_session  # type: ignore[assignment]

FAULTS = ServerConfig(
    latency=0.005,
    rate_429=0.15,
    retry_after=0.0,
    rate_500=0.05,
    rate_timeout=0.02,
    timeout_delay=20.0,
    rate_garbage=0.03,
    seed=7,
)


def scores(result: Any) -> dict[int, Any]:
    return {r["line"]: (r.get("outputs") or {}).get("score") for r in result.rows()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    limits = {"max_retries": 10}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_rows(root / "rows.jsonl", args.rows)
        with serve_subprocess(ServerConfig(latency=FAULTS.latency)) as clean:
            _, reference = run_groundedness(
                data, root / "clean", clean.base_url, args.concurrency, **limits
            )
            expected = scores(reference)
            ceilings = [
                raw_ceiling(clean.base_url, args.rows, args.concurrency) for _ in range(args.runs)
            ]
        rates, notes = [], []
        with serve_subprocess(FAULTS) as srv:
            for run in range(args.runs):
                srv.reset()
                elapsed, result = run_groundedness(
                    data, root / f"faulty-{run}", srv.base_url, args.concurrency, **limits
                )
                got = scores(result)
                scored = {line: s for line, s in got.items() if s is not None}
                snap = sessions[-1].schedulers()[0].snapshot()
                rates.append(args.rows / elapsed)
                notes.append(
                    f"run {run + 1}: {args.rows / elapsed:.0f} rows/s, "
                    f"accounted {len(got)}/{args.rows}, ok {result.counts['succeeded']}, "
                    f"scored {len(scored)}, equal to the fault-free run's "
                    f"{all(expected[line] == s for line, s in scored.items())}, "
                    f"faults {dict(srv.stats()['faults'])}, "
                    f"429s {snap['rate_limited']} (overload {snap['overloads']}), "
                    f"stalls cut {snap['stalled']} at {snap['stall_deadline'] or 0:.3f}s"
                )
        for note in notes:
            print(note)
        ratios = [r / c for r, c in zip(sorted(rates), sorted(ceilings), strict=True)]
        print(
            f"fault mix c={args.concurrency} rows={args.rows}: flowkit {spread(rates)} rows/s "
            f"(target >= 50), raw client on a fault-free server {spread(ceilings)} rows/s, "
            f"ratio {spread(ratios)} over {args.runs} runs; {load_average()}",
            flush=True,
        )


if __name__ == "__main__":
    main()
