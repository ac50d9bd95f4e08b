"""Benchmark: a worker killed mid-run, on each process backend.

    python benchmarks/worker_loss.py [--rows 640] [--backends loky dask ray] [--chunk-size N]
        [--kills K]

An llm flow (one judge call per row, then a python node) over N rows against the test server
in a child process (the flow of tests/runs/test_worker_loss.py, with a 20 ms latency), once
locally and once per backend on two workers; on the backend run, the
worker that runs the middle row kills itself (SIGKILL) right after that row's model call, once.
Prints per backend whether the outputs equal the local run's, the rows kept and the model calls
made beyond one per row (a lost chunk's calls, made again), against the chunk size. With
``--kills K`` each backend runs K times, the killed row spread over the data (1/(K+1) of the
way in, 2/(K+1), …), and the largest and the mean extra calls are printed after the runs. Ray
is skipped where it is not installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from flowkit.testing.server import ServerConfig, serve_subprocess

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the flow of the tests
from tests.runs.test_worker_loss import FLOW, KILLER, kill_at


def _outputs(run_dir: Path) -> list[Any]:
    return [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=640)
    parser.add_argument("--backends", nargs="+", default=["loky", "dask", "ray"])
    parser.add_argument("--chunk-size", type=int, default=None)
    parser.add_argument("--kills", type=int, default=1)
    args = parser.parse_args()

    import flowkit
    from flowkit.runs.backends import CHUNK_ROWS_LLM

    size = args.chunk_size or CHUNK_ROWS_LLM
    work = Path(tempfile.mkdtemp(prefix="flowkit-worker-loss-"))
    data = prepare(work, args.rows)
    with serve_subprocess(ServerConfig(latency=0.05)) as server:
        os.environ.update(
            OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-local", FLOWKIT_MODEL="m"
        )
        local = flowkit.run("judged.yaml", str(data), use_cache=False, output="local")
        print(f"{args.rows} rows, chunk size {size}, 2 workers, one worker killed mid-run")
        for backend in args.backends:
            if backend == "ray" and importlib.util.find_spec("ray") is None:
                print(f"{backend:6} skipped: ray is not installed")
                continue
            extras = []
            for kill in range(args.kills):
                row = args.rows * (kill + 1) // (args.kills + 1)
                got = killed(backend, work, data, local.run_dir, server, size, row)
                extras.append(got["extra"])
            if args.kills > 1:
                print(
                    f"{backend:6} {args.kills} kills: extra calls at most {max(extras)}, "
                    f"mean {sum(extras) / len(extras):.1f} (chunk {size})"
                )


def prepare(work: Path, rows: int) -> Path:
    """The flow, its killer node and ``rows`` rows written into ``work``, made the working
    directory; the data file."""
    os.chdir(work)
    (work / "judged.yaml").write_text(textwrap.dedent(FLOW))
    (work / "killer.py").write_text(KILLER)
    data = work / "rows.jsonl"
    data.write_text("".join(json.dumps({"q": f"q-{i}"}) + "\n" for i in range(rows)))
    return data


def killed(
    backend: str, work: Path, data: Path, local: Path, server: Any, size: int, row: int
) -> dict[str, Any]:
    """One run on ``backend`` (two workers) whose worker running ``row`` is killed, from
    ``work`` (see :func:`prepare`): whether it was, the rows kept, the model calls beyond one
    per row and whether the outputs equal the local run's in ``local``. Printed too."""
    import flowkit

    rows = len(data.read_text().splitlines())
    options: dict[str, Any] = {}
    cluster = None
    if backend == "dask":
        from distributed import LocalCluster

        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=":0", env=dict(os.environ)
        )
        options["scheduler"] = cluster.scheduler_address
    if backend == "ray":
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    server.reset()
    marker = work / f"killed-{backend}-{row}"
    t0 = time.monotonic()
    try:
        result = flowkit.run(
            "judged.yaml",
            str(data),
            use_cache=False,
            output=f"{backend}-{row}",
            backend=backend,
            chunk_size=size,
            environment=kill_at(str(marker), row),
            **options,
        )
    finally:
        if cluster is not None:
            cluster.close()
        if backend == "ray":
            ray.shutdown()
    calls = server.stats()["chat_completions"]
    same = _outputs(result.run_dir) == _outputs(local)
    got = {
        "killed": marker.exists(),
        "identical": same,
        "kept": result.counts["succeeded"],
        "extra": int(calls - rows),
    }
    print(
        f"{backend:6} row {row} killed={got['killed']} identical={same} "
        f"rows kept {got['kept']}/{rows}, extra calls {got['extra']} (chunk {size}), "
        f"{time.monotonic() - t0:.1f} s",
        flush=True,
    )
    return got


if __name__ == "__main__":
    main()
