"""Benchmark (scale-out): issue 27's "done when" figures, one table row per backend.

    python benchmarks/scale_out.py [--backends loky dask ray] [--concurrency 8] [--rows 32]
        [--rate-rows 30] [--loss-rows 128] [--chunk-size 16] [--rerun-rows 40]
        [--resume-rows 160] [--lease 2]

On two workers of each backend (a local two-process Dask cluster; a local two-CPU Ray),
against flowkit's test server and moto's S3 server, both started here on 127.0.0.1:

- **in flight**: the most requests the endpoint had in flight at once, against
  ``--concurrency`` (`global_budget.py`); met when equal;
- **rejected**: the share of requests a 600 rpm endpoint with rate-limit headers answered 429
  (`global_budget.py`); met at 0%;
- **worker killed**: a worker SIGKILLs itself mid-run after its row's model call
  (`worker_loss.py`): rows kept and model calls beyond one per row, against the chunk size;
  met when every row is kept, the outputs are a local run's and the extra calls are at most
  one chunk;
- **2nd driver's rerun**: `groundedness` run once with ``--cache-dir s3://…``, then rerun on
  the workers by a second driver (a `flowkit run` process with another HOME, working directory
  and local cache folder) that shares only that object store: its model calls; met at 0;
- **resume elsewhere**: a run on the workers writing its folder to ``s3://…`` is SIGKILLed
  (the driver) after a quarter of its rows were uploaded, then ``flowkit run --resume`` from
  "another host" (another HOME, working directory and staging folder, once the lease of
  ``--lease`` seconds expired): distinct rows kept and rows doubled; met when every row is
  there once.

Each figure is of one run; the load average is the machine's when the backend's row is printed.
Needs ``pip install 'flowkit[s3,dask,ray]' 'moto[server]'``; Ray is skipped where missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import load_average, write_rows
from global_budget import cluster, measure
from remote_runs import kill_and_resume, moto_s3
from worker_loss import killed, prepare

import flowkit
from flowkit.runs.remote import STAGING_ENV, RemoteFolder
from flowkit.testing.server import LocalServer, ServerConfig, serve, serve_subprocess

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "scale-out"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["loky", "dask", "ray"])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--rows", type=int, default=32, help="rows of the in-flight run (few rows hold fewer)"
    )
    parser.add_argument("--rate-rows", type=int, default=30, help="rows at 600 rpm")
    parser.add_argument("--loss-rows", type=int, default=128, help="rows of a killed worker's run")
    parser.add_argument("--chunk-size", type=int, default=16, help="of the killed worker's run")
    parser.add_argument("--rerun-rows", type=int, default=40)
    parser.add_argument("--resume-rows", type=int, default=160)
    parser.add_argument("--lease", type=float, default=2.0, help="FLOWKIT_LEASE_SECONDS")
    args = parser.parse_args()
    backends = [b for b in args.backends if b != "ray" or importlib.util.find_spec("ray")]
    for missing in sorted(set(args.backends) - set(backends)):
        print(f"{missing} skipped: it is not installed")
    # The clusters here are local: their workers reach the driver on loopback.
    os.environ.setdefault("FLOWKIT_LEASE_BIND", "127.0.0.1")
    os.environ.pop("FLOWKIT_CACHE_DIR", None)
    # The Ray started here is a throwaway local one: without this, its drivers in another
    # HOME would need the token Ray writes into this HOME.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    work = Path(tempfile.mkdtemp(prefix="flowkit-scale-out-"))
    figures: dict[str, dict[str, Any]] = {b: {} for b in backends}
    # The phases run one after the other for all backends: each sets the model endpoint of
    # the process's environment, which the workers it starts inherit.
    for backend in backends:
        folder = work / f"budget-{backend}"
        folder.mkdir()
        figures[backend].update(
            measure(backend, folder, args.rows, args.rate_rows, args.concurrency)
        )
    loss = work / "loss"
    loss.mkdir()
    data = prepare(loss, args.loss_rows)
    with serve_subprocess(ServerConfig(latency=0.05)) as server:
        os.environ.update(
            OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-local", FLOWKIT_MODEL="m"
        )
        local = flowkit.run("judged.yaml", str(data), use_cache=False, output="local")
        for backend in backends:
            got = killed(
                backend, loss, data, local.run_dir, server, args.chunk_size, args.loss_rows // 2
            )
            figures[backend]["loss"] = got
    with moto_s3(work), serve(latency=0.05) as server:
        os.environ.update(OPENAI_BASE_URL=server.base_url, FLOWKIT_MODEL="bench")
        RemoteFolder(f"s3://{BUCKET}").fs.mkdir(BUCKET)
        for backend in backends:
            with cluster(backend) as options:
                address = options.get("scheduler") or _ray_address(backend)
                figures[backend]["rerun"] = second_driver(work, server, backend, address, args)
                figures[backend]["resume"] = resumed(work, backend, address, args)
            figures[backend]["load"] = load_average()
    os.chdir(tempfile.gettempdir())
    shutil.rmtree(work, ignore_errors=True)
    print()
    print(table(figures, args))


def _ray_address(backend: str) -> str | None:
    """The address of the local Ray this process started, which the drivers below join."""
    if backend != "ray":
        return None
    import ray

    return str(ray.get_runtime_context().gcs_address)


def host(work: Path, name: str) -> tuple[dict[str, str], Path]:
    """The environment and working directory of "another host" ``name``: its own HOME, cache
    and staging folders, flowkit's source first on its path."""
    place = work / name
    (place / "home").mkdir(parents=True)
    env = {
        **os.environ,
        "HOME": str(place / "home"),
        "XDG_CACHE_HOME": str(place / "home" / ".cache"),
        STAGING_ENV: str(place / "staging"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return env, place


def cli(backend: str, address: str | None, *options: str) -> list[str]:
    """A `flowkit run` of `groundedness` on two workers of ``backend``."""
    joined = ["--scheduler", address] if address else []
    return [
        sys.executable, "-m", "flowkit.cli", "run", "groundedness", "--backend", backend,
        "--workers", "2", *joined, "-q", *options,
    ]  # fmt: skip


def second_driver(
    work: Path, server: LocalServer, backend: str, address: str | None, args: Any
) -> int:
    """Model calls of a rerun on ``backend``'s workers by a second driver sharing only the
    object-store cache with the first, local run."""
    cache = f"s3://{BUCKET}/cache-{backend}"
    data = write_rows(work / f"rerun-{backend}.jsonl", args.rerun_rows)
    first = work / f"first-{backend}"
    first.mkdir()
    os.chdir(first)
    server.reset()
    flowkit.run("groundedness", data, cache_dir=cache, output="first")
    assert server.stats()["chat_completions"] >= args.rerun_rows  # the cache was empty
    env, place = host(work, f"rerun-{backend}")
    server.reset()
    done = subprocess.run(
        cli(backend, address, "--data", str(data), "--cache-dir", cache),
        env=env, cwd=place, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(server.stats()["chat_completions"])


def resumed(work: Path, backend: str, address: str | None, args: Any) -> dict[str, Any]:
    """A run on ``backend``'s workers into ``s3://`` SIGKILLed mid-run, resumed from another
    host once its lease expired (see :func:`remote_runs.kill_and_resume`)."""
    data = write_rows(work / f"resume-{backend}.jsonl", args.resume_rows)
    url = f"s3://{BUCKET}/runs/{backend}"
    first, first_cwd = host(work, f"driver-{backend}")
    again, again_cwd = host(work, f"other-{backend}")
    for env in (first, again):
        env["FLOWKIT_LEASE_SECONDS"] = str(args.lease)
    command = cli(
        backend, address, "--data", str(data), "--output", url, "--no-cache",
        "--concurrency", "4", "--chunk-size", str(args.chunk_size),
    )  # fmt: skip
    return kill_and_resume(
        command, url, args.resume_rows // 4, first, again, cwd=first_cwd, again_cwd=again_cwd
    )


def table(figures: dict[str, dict[str, Any]], args: Any) -> str:
    """The markdown table of the figures, a met/not-met column after each."""

    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    lines = [
        "| backend | in flight (--concurrency) | | rejected at 600 rpm | | worker killed: rows "
        "kept, extra calls (chunk) | | 2nd driver's rerun over s3: model calls | | resume "
        "from another host: rows kept, doubled | | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for backend, got in figures.items():
        sent, rejected = got["sent"], got["rejected"]
        loss, resume = got["loss"], got["resume"]
        loss_ok = (
            loss["killed"]
            and loss["identical"]
            and loss["kept"] == args.loss_rows
            and loss["extra"] <= args.chunk_size
        )
        doubled = resume["lines"] - resume["distinct"]
        # Killed mid-run: still running, and rows left that its folder did not hold yet.
        mid_run = resume["mid_run"] and resume["at_kill"] < args.resume_rows
        resume_ok = mid_run and resume["distinct"] == args.resume_rows and not doubled
        lines.append(
            f"| {backend} | {got['in_flight']} ({args.concurrency}) "
            f"| {met(got['in_flight'] == args.concurrency)} "
            f"| {100 * rejected / max(1, sent):.0f}% ({rejected} of {sent}) "
            f"| {met(rejected == 0 and got['rate_succeeded'] == args.rate_rows)} "
            f"| {loss['kept']}/{args.loss_rows}, {loss['extra']} ({args.chunk_size})"
            f"{'' if loss['identical'] else ', outputs differ'} | {met(loss_ok)} "
            f"| {got['rerun']} of {args.rerun_rows} rows | {met(got['rerun'] == 0)} "
            f"| {resume['distinct']}/{args.resume_rows} ({resume['at_kill']} at the kill), "
            f"{doubled}{'' if mid_run else ', finished before the kill'} "
            f"| {met(resume_ok)} "
            f"| {got['load']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
