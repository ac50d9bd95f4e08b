"""Running rows on other processes and machines (flowkit.runs.backends): the run folder, the metrics
and the cache come out as a local run's, whichever backend ran the rows.

The Dask tests start a real two-process LocalCluster and pass its address as `--scheduler`, as
a user would for a cluster of their own. Ray's test is in the `cluster` stage of .ci/run, which
installs ray (it is not in the dev extra: see docs/scale-out.md).
"""

from __future__ import annotations

import importlib.util
import json
import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.api import RunResult
from flowkit.testing.server import LocalServer, serve
from tests.support import read_json, read_jsonl, write, write_jsonl

WORDS = ["the", "a", "river", "city", "paris", "france", "water", "boils", "spider", "legs"]


def _qa_rows(count: int) -> list[dict[str, Any]]:
    rng = random.Random(count)
    return [
        {
            "question": f"question {i}?",
            "context": " ".join(rng.choices(WORDS, k=6)),
            "answer": " ".join(rng.choices(WORDS, k=5)),
            "ground_truth": " ".join(rng.choices(WORDS, k=3)),
        }
        for i in range(count)
    ]


def _same_results(local: RunResult, remote: RunResult) -> None:
    """Outputs (in input order), metrics and counts as a local run has them."""
    assert read_jsonl(remote.run_dir / "outputs.jsonl") == read_jsonl(
        local.run_dir / "outputs.jsonl"
    )
    assert read_json(remote.run_dir / "metrics.json") == read_json(local.run_dir / "metrics.json")
    # The workers' cache lookups are counted too, not only the driver's.
    for name in ("rows", "succeeded", "failed", "node_runs", "cache_hits", "cache_misses"):
        assert remote.counts[name] == local.counts[name], name
    traces = read_jsonl(remote.run_dir / "traces.jsonl")
    assert len(traces) == len(read_jsonl(local.run_dir / "traces.jsonl"))


def _f1_here_and_on(backend: str, tmp_path: Path, rows: int, **options: Any) -> RunResult:
    """Run f1_score over ``rows`` rows (tmp_path/qa.jsonl) locally, then on ``backend`` with
    ``options`` and its own cache (tmp_path/cache); check the two agree; return the backend's."""
    data = write_jsonl(tmp_path / "qa.jsonl", _qa_rows(rows))
    local = flowkit.run("f1_score", data, cache_dir=tmp_path / "local-cache", output="local")
    remote = flowkit.run(
        "f1_score", data, cache_dir=tmp_path / "cache", output=backend, backend=backend, **options
    )
    _same_results(local, remote)
    return remote


@pytest.fixture(scope="module")
def dask_scheduler(_server: LocalServer) -> Iterator[str]:
    """A two-process cluster. Its workers configure the model endpoint from their own
    environment, as workers of a real cluster do: the driver sends them no settings."""
    distributed = pytest.importorskip("distributed")
    env = {
        "OPENAI_BASE_URL": _server.base_url,
        "OPENAI_API_KEY": "sk-local-test",
        "FLOWKIT_MODEL": "flowkit-test",
    }
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", env=env
    ) as cluster:
        yield cluster.scheduler_address


def test_dask_cluster_runs_a_python_flow_as_a_local_run_does(
    dask_scheduler: str, tmp_path: Path, workdir: Path
) -> None:
    remote = _f1_here_and_on(
        "dask",
        tmp_path,
        700,
        scheduler=dask_scheduler,
        chunk_size=256,  # three chunks, so the order they come back in matters
    )
    assert remote.info["options"]["backend"] == "dask"
    # The driver wrote what the workers computed into its cache: a rerun computes nothing.
    again = flowkit.run(
        "f1_score", tmp_path / "qa.jsonl", cache_dir=tmp_path / "cache", output="again"
    )
    assert again.counts["node_runs"] == 0
    assert again.counts["cache_hits"] == remote.counts["node_runs"]


def test_dask_cluster_runs_an_llm_flow_calling_the_model_once_per_row(
    dask_scheduler: str, llm_server: LocalServer, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "qa.jsonl", _qa_rows(60))
    local = flowkit.run("groundedness", data, use_cache=False, output="local")
    assert llm_server.stats()["chat_completions"] == 60
    llm_server.reset()
    remote = flowkit.run(
        "groundedness",
        data,
        use_cache=False,
        output="dask",
        backend="dask",
        scheduler=dask_scheduler,
        chunk_size=16,
    )
    _same_results(local, remote)
    assert llm_server.stats()["chat_completions"] == 60
    assert remote.tokens == local.tokens


def test_threading_backend_folds_chunks_in_input_order(tmp_path: Path, workdir: Path) -> None:
    _f1_here_and_on("threading", tmp_path, 300, workers=3, chunk_size=40)


@pytest.mark.cluster  # a local Ray takes seconds to start (.ci/run installs ray for this stage)
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")
def test_ray_runs_a_python_flow_as_a_local_run_does(tmp_path: Path, workdir: Path) -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _f1_here_and_on("ray", tmp_path, 300, chunk_size=128)
    finally:
        ray.shutdown()


def test_a_worker_refuses_a_flow_that_differs_from_the_drivers(tmp_path: Path) -> None:
    from flowkit.errors import UsageError
    from flowkit.flow.loader import load_flow
    from flowkit.runs.backends import WorkerJob, _load
    from flowkit.runs.bundle import pack
    from flowkit.runs.config import RunConfig

    flow = load_flow("f1_score")
    job = WorkerJob(pack(flow), RunConfig(), "r", flow.content_hash)
    assert _load(job).content_hash == flow.content_hash
    stale = WorkerJob(pack(flow), RunConfig(), "r", "0" * 64)
    with pytest.raises(UsageError) as raised:
        _load(stale)
    assert raised.value.message == (
        f"worker on {socket.gethostname()}: loaded flow 'f1_score' and got different nodes, "
        "prompts or code than the driver"
    )


def test_workers_use_the_runs_model_options(llm_server: LocalServer, workdir: Path) -> None:
    # The workers read the same RunConfig as the driver: --embedding-model reaches them too.
    data = write_jsonl(workdir / "qa.jsonl", _qa_rows(6))
    result = flowkit.run(
        "embedding_similarity",
        data,
        output="threads",
        backend="threading",
        workers=2,
        chunk_size=2,
        embedding_model="emb-x",
    )
    models = {
        t["llm"]["model"] for t in read_jsonl(result.run_dir / "traces.jsonl") if t.get("llm")
    }
    assert models == {"emb-x"}
    judging = read_json(result.run_dir / "run.json")["judging"]
    assert {entry["model"] for entry in judging.values()} == {"emb-x"}


RPM = 600  # 10 requests a second, a burst of 5: the runs below take about 4 s together
JUDGE = """
    name: judge
    inputs: {q: {type: string}}
    outputs: {said: ${judge.output}}
    nodes:
      - name: judge
        type: llm
        messages: [{role: user, content: "Say something about {{ q }}"}]
        inputs: {q: ${inputs.q}}
    """


def test_threading_workers_share_the_processs_declared_rpm_with_its_other_runs(
    workdir: Path,
) -> None:
    """A local run and a run on two threading workers, at once in one process, against one
    connection's declared rpm: the workers are threads of this process, so they draw from the
    process's budget at the declared rate, with the local run, and no request is rejected."""
    with serve(rpm=RPM, limit_window=60.0, retry_after=0.5) as server:
        conn = {"base_url": server.base_url, "api_key": "k", "rpm": RPM, "max_retries": 3}
        write(
            workdir / "flowkit.yaml",
            f"default_model: m1\nconnections:\n  lim: {json.dumps(conn)}\n",
        )
        write(workdir / "judge.yaml", JUDGE)
        flow = flowkit.load_flow("judge.yaml")
        start = threading.Barrier(2, timeout=20)
        done: dict[str, RunResult] = {}

        def run(name: str, **options: Any) -> None:
            rows = [{"q": f"{name}-{i}"} for i in range(20)]
            start.wait()
            done[name] = flowkit.run(flow, rows, use_cache=False, name=name, **options)

        threads = [
            threading.Thread(target=run, args=("local",)),
            threading.Thread(
                target=run, args=("threads",), kwargs={"backend": "threading", "workers": 2}
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        stats = server.stats()
    assert {name: r.counts["succeeded"] for name, r in done.items()} == {"local": 20, "threads": 20}
    assert stats["by_status"].get("429", 0) == 0 and stats["chat_completions"] == 40
