"""A run folder in an object store against one on local disk: `f1_score` over N rows written
to a local folder and to ``s3://`` on moto's S3 server (started here on 127.0.0.1), each
repeated; then a run killed with SIGKILL and resumed from "another host" (another staging
folder) once its lease expired, with the seconds that took and the rows kept.

    python benchmarks/remote_runs.py [--rows 20000] [--repeat 3] [--lease 2]

Needs ``pip install 'flowkit[s3]' 'moto[server]'``. The best of the repeats is the figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from moto.server import ThreadedMotoServer

import flowkit
from flowkit.runs.remote import STAGING_ENV, RemoteFolder

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def moto_s3(work: Path) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 for as long as the block runs, with this process's
    ``AWS_*`` variables (which child processes inherit) pointing at it and no AWS file of the
    user's read; its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(work / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(work / "none"),
    )
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def uploaded(url: str) -> list[dict[str, Any]]:
    """The output rows of the run folder at ``url`` uploaded so far."""
    text = RemoteFolder(url).read("outputs.jsonl") or b""
    return [json.loads(line) for line in text.splitlines()]


def kill_and_resume(
    first: list[str], url: str, kill_after: int, env: dict[str, str], again: dict[str, str],
    *, cwd: Path | None = None, again_cwd: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Start the run ``first`` (a command writing its folder to ``url``) with ``env`` in
    ``cwd``, SIGKILL it once ``kill_after`` rows are uploaded, then ``flowkit run --resume url``
    with ``again`` (another host's environment: another staging folder, HOME, …) in
    ``again_cwd``, tried again while the dead run's lease has not expired. The rows uploaded at
    the kill (and whether the run was still running then), the output lines in the end, the
    distinct rows among them and the seconds from the kill to the resumed run's end."""
    # A session of its own: what the killed run started (loky's workers) is ended below with it.
    proc = subprocess.Popen(first, env=env, cwd=cwd, start_new_session=True)
    try:
        while len(uploaded(url)) < kill_after and proc.poll() is None:
            time.sleep(0.05)
    finally:
        mid_run = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    kept = len(uploaded(url))
    killed = time.perf_counter()
    with suppress(ProcessLookupError):  # local workers outlive their driver until idle
        os.killpg(proc.pid, signal.SIGKILL)
    while True:
        done = subprocess.run(
            [sys.executable, "-m", "flowkit.cli", "run", "--resume", url, "-q"],
            env=again, cwd=again_cwd, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 2 or "lease expires" not in done.stderr:
            break
        time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    lines = [r["line"] for r in uploaded(url)]
    return {
        "mid_run": mid_run,
        "at_kill": kept,
        "lines": len(lines),
        "distinct": len(set(lines)),
        "seconds": time.perf_counter() - killed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lease", type=float, default=2.0, help="FLOWKIT_LEASE_SECONDS")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flowkit-remote-"))
    with moto_s3(work):
        os.environ[STAGING_ENV] = str(work / "staging-a")
        os.chdir(work)
        rows = [{"answer": f"the answer {i} is {i % 7}", "ground_truth": f"answer {i % 7}"}
                for i in range(args.rows)]  # fmt: skip
        Path("data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        RemoteFolder("s3://bench-runs").fs.mkdir("bench-runs")
        flowkit.run("f1_score", "data.jsonl", name="warm", use_cache=False)
        local, remote = [], []
        for i in range(args.repeat):
            t0 = time.perf_counter()
            flowkit.run("f1_score", "data.jsonl", name=f"local{i}", use_cache=False)
            local.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            flowkit.run("f1_score", "data.jsonl", output=f"s3://bench-runs/r{i}", use_cache=False)
            remote.append(time.perf_counter() - t0)
        print(f"{args.rows} rows: local folder {min(local):.2f} s, s3 (moto) {min(remote):.2f} s")

        url = "s3://bench-runs/killed"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FLOWKIT_LEASE_SECONDS": str(args.lease)}
        cmd = [sys.executable, "-m", "flowkit.cli", "run", "f1_score", "--data", "data.jsonl"]
        again = {**env, STAGING_ENV: str(work / "staging-b")}  # another machine's staging
        got = kill_and_resume([*cmd, "--output", url, "--no-cache", "-q"], url, args.rows // 4,
                              env, again)  # fmt: skip
        print(
            f"killed after {got['at_kill']} rows uploaded; resumed from another staging, done "
            f"{got['seconds']:.1f} s after the kill (lease {args.lease:g} s); "
            f"{got['distinct']} of {args.rows} rows, {got['lines'] - got['distinct']} doubled"
        )


if __name__ == "__main__":
    main()
