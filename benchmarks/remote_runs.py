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
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from moto.server import ThreadedMotoServer

import flowkit
from flowkit.runs.remote import STAGING_ENV, RemoteFolder

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lease", type=float, default=2.0, help="FLOWKIT_LEASE_SECONDS")
    args = parser.parse_args()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    work = Path(tempfile.mkdtemp(prefix="flowkit-remote-"))
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(work / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(work / "none"),
    )
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
    proc = subprocess.Popen([*cmd, "--output", url, "--no-cache", "-q"], env=env)
    folder = RemoteFolder(url)
    while len((folder.read("outputs.jsonl") or b"").splitlines()) < args.rows // 4:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len((folder.read("outputs.jsonl") or b"").splitlines())
    killed = time.perf_counter()
    env[STAGING_ENV] = str(work / "staging-b")  # another machine's staging
    while True:
        done = subprocess.run(
            [sys.executable, "-m", "flowkit.cli", "run", "--resume", url, "-q"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 2 or "lease expires" not in done.stderr:
            break
        time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    final = [json.loads(x) for x in (folder.read("outputs.jsonl") or b"").splitlines()]
    lines = [r["line"] for r in final]
    print(
        f"killed after {kept} rows uploaded; resumed from another staging, done "
        f"{time.perf_counter() - killed:.1f} s after the kill (lease {args.lease:g} s); "
        f"{len(set(lines))} of {args.rows} rows, {len(lines) - len(set(lines))} doubled"
    )
    server.stop()


if __name__ == "__main__":
    main()
