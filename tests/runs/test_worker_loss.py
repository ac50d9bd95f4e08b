"""A worker that dies mid-run (flowkit.runs.dispatch): its chunk runs again on another worker,
nothing is lost, the outputs are a local run's, and the extra model calls are at most one chunk.

The worker kills itself (SIGKILL, as the OOM killer or a lost machine would) while it runs one
row of the middle of the data, after that row's model call: a python node of the flow does it,
once, the first time it meets that row in a process that has ``FLOWKIT_TEST_KILL`` set. Each
test starts worker processes (and the Dask and Ray ones real clusters), which takes seconds:
they are marked ``cluster``, a stage of .ci/run of its own.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.runs.backends import CHUNK_ROWS_LLM
from flowkit.runs.dispatch import shutdown_pools
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl

pytestmark = pytest.mark.cluster

ROWS = 160
KILL_AT = 70  # in the third chunk of 32: chunks before it have finished, others are out

FLOW = """
    name: judged
    inputs: {q: {type: string}}
    outputs: {said: ${judge.output}, size: ${check.output}}
    nodes:
      - name: judge
        type: llm
        messages: [{role: user, content: "[[latency: 0.02]] Say something about {{ q }}"}]
        inputs: {q: ${inputs.q}}
      - {name: check, type: python, source: killer.py, function: check,
         inputs: {said: ${judge.output}, q: ${inputs.q}}}
    """
KILLER = """
import os, signal
from pathlib import Path

def check(said: str, q: str) -> int:
    marker = os.environ.get("FLOWKIT_TEST_KILL")
    row = os.environ.get("FLOWKIT_TEST_KILL_ROW")
    if marker and q == row and (marker == "always" or not Path(marker).exists()):
        if marker != "always":
            Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return len(said)
"""
"""The python node that kills its worker: in a process where FLOWKIT_TEST_KILL names a marker
file not yet there (or is "always"), on the row FLOWKIT_TEST_KILL_ROW names."""


def kill_at(marker: str, row: int) -> dict[str, str]:
    """The run's environment that has the worker running row ``row`` killed."""
    return {"FLOWKIT_TEST_KILL": marker, "FLOWKIT_TEST_KILL_ROW": f"q-{row}"}


@pytest.fixture
def flow(llm_server: LocalServer, workdir: Path) -> Iterator[Path]:
    write(workdir / "killer.py", KILLER)
    yield write(workdir / "judged.yaml", FLOW)
    shutdown_pools()  # the next test's workers start in its own directory and environment


def _killed_on(
    backend: str, flow: Path, server: LocalServer, tmp: Path, chunks: int = 1, **options: Any
) -> None:
    """Run the flow locally, then on ``backend`` with one worker killed mid-run; compare. At
    most ``chunks`` chunks' calls are made again."""
    data = write_jsonl(tmp / "rows.jsonl", [{"q": f"q-{i}"} for i in range(ROWS)])
    local = flowkit.run(str(flow), data, use_cache=False, output=str(tmp / "local"))
    assert server.stats()["chat_completions"] == ROWS
    server.reset()
    marker = tmp / "killed"
    remote = flowkit.run(
        str(flow),
        data,
        use_cache=False,
        output=str(tmp / backend),
        backend=backend,
        environment=kill_at(str(marker), KILL_AT),
        **options,
    )
    assert marker.exists(), "no worker was killed"
    assert read_jsonl(remote.run_dir / "outputs.jsonl") == read_jsonl(
        local.run_dir / "outputs.jsonl"
    )
    assert remote.counts["succeeded"] == ROWS
    extra = server.stats()["chat_completions"] - ROWS
    assert 0 <= extra <= chunks * CHUNK_ROWS_LLM, extra


def test_a_killed_loky_worker_costs_at_most_one_chunk(
    flow: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    shutdown_pools()  # workers that see this test's server and directory
    _killed_on("loky", flow, llm_server, tmp_path, workers=2)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_dask_worker_costs_at_most_one_chunk(
    workers: int, flow: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    distributed = pytest.importorskip("distributed")
    env = {k: os.environ[k] for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWKIT_MODEL")}
    # With one worker, the chunk it finished just before the kill is surely the last one the
    # driver took: Dask computed it again (it keeps a finished task's result on its worker
    # while a client holds the task, and recomputes it when that worker dies) until each task
    # was released as soon as its result was fetched.
    with distributed.LocalCluster(
        n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=":0", env=env
    ) as cluster:
        _killed_on("dask", flow, llm_server, tmp_path, scheduler=cluster.scheduler_address)


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_a_killed_ray_worker_costs_at_most_one_chunk(
    flow: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _killed_on("ray", flow, llm_server, tmp_path)
    finally:
        ray.shutdown()


def test_a_chunk_whose_workers_keep_dying_stops_the_run_keeping_finished_rows(
    flow: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    from flowkit.runs.dispatch import RETRIES, WorkerLost

    shutdown_pools()
    data = write_jsonl(tmp_path / "rows.jsonl", [{"q": f"q-{i}"} for i in range(ROWS)])
    with pytest.raises(WorkerLost) as raised:
        flowkit.run(
            str(flow),
            data,
            use_cache=False,
            output=str(tmp_path / "lost"),
            backend="loky",
            environment=kill_at("always", KILL_AT),  # every worker that runs the row
        )
    first = KILL_AT // CHUNK_ROWS_LLM * CHUNK_ROWS_LLM
    assert raised.value.message == (
        f"the worker running rows {first}-{first + CHUNK_ROWS_LLM - 1} died {RETRIES + 1} times "
        "(TerminatedWorkerError); the rows that finished are kept"
    )
    kept = read_jsonl(tmp_path / "lost" / "outputs.jsonl")
    assert [row["line"] for row in kept[:first]] == list(range(first))


def test_sigterm_on_the_driver_stops_the_workers_and_keeps_finished_rows(
    flow: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    import signal
    import threading
    import time

    from flowkit.runs.job import Interrupted
    from tests.support import read_json

    shutdown_pools()
    data = write_jsonl(tmp_path / "rows.jsonl", [{"q": f"q-{i}"} for i in range(2000)])

    def stop_when_busy() -> None:
        while llm_server.stats()["chat_completions"] < 100:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_when_busy)
    stopper.start()
    with pytest.raises(Interrupted):
        flowkit.run(str(flow), data, use_cache=False, output=str(tmp_path / "s"), backend="loky")
    stopper.join()
    time.sleep(0.5)  # requests the workers had sent before they were stopped are answered
    calls = llm_server.stats()["chat_completions"]
    time.sleep(1.0)
    assert llm_server.stats()["chat_completions"] == calls  # no worker went on
    assert calls < 2000
    info = read_json(tmp_path / "s" / "run.json")
    kept = read_jsonl(tmp_path / "s" / "outputs.jsonl")
    assert info["status"] == "interrupted"
    assert 0 < len(kept) == info["counts"]["succeeded"]


def test_sigterm_on_a_threading_run_closes_it_as_interrupted_at_once(
    flow: Path, llm_server: LocalServer, tmp_path: Path
) -> None:
    """The threads' chunks run on and hold their connections to the lease service: stopping
    it does not wait for them (it did, 30 s, then the run failed with a TimeoutError)."""
    import signal
    import threading
    import time

    from flowkit.runs.job import Interrupted
    from tests.support import read_json

    data = write_jsonl(tmp_path / "rows.jsonl", [{"q": f"q-{i}"} for i in range(2000)])
    stopped: list[float] = []

    def stop_when_busy() -> None:
        while llm_server.stats()["chat_completions"] < 100:
            time.sleep(0.01)
        stopped.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_when_busy)
    stopper.start()
    with pytest.raises(Interrupted):
        flowkit.run(
            str(flow), data, use_cache=False, output=str(tmp_path / "s"), backend="threading"
        )
    assert time.monotonic() - stopped[0] < 15
    stopper.join()
    assert read_json(tmp_path / "s" / "run.json")["status"] == "interrupted"
