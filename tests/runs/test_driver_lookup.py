"""The driver looks the cache up before rows go out (flowkit.runs.lookup): a row the cache
answers is finished on the driver and never sent; a missed row goes out with the entries found
for it, so a worker that cannot see the driver's cache pays only for what is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import read_json, read_jsonl, write, write_jsonl

# Two model calls a row, then a plain function that says where it ran (never cached).
FLOW = """
    name: two_calls
    inputs: {q: {type: string}}
    outputs: {said: ${second.output}, where: ${where.output}}
    nodes:
      - name: first
        type: llm
        messages: [{role: user, content: "Say something about {{ q }}"}]
        inputs: {q: ${inputs.q}}
      - name: second
        type: llm
        messages: [{role: user, content: "SECOND_PROMPT {{ said }}"}]
        inputs: {said: ${first.output}}
      - name: where
        type: python
        source: where.py
        function: where
        cache: false
        inputs: {said: ${second.output}}
    """
WHERE = """
import os
import threading


def where(said: str) -> dict:
    main = threading.current_thread() is threading.main_thread()
    return {"pid": os.getpid(), "main_thread": main}
"""


def _flow(folder: Path, second_prompt: str = "Now shorten:") -> Path:
    write(folder / "where.py", WHERE)
    return write(folder / "two_calls.yaml", FLOW.replace("SECOND_PROMPT", second_prompt))


def _where(result: Any) -> list[dict[str, Any]]:
    return [row["outputs"]["where"] for row in read_jsonl(result.run_dir / "outputs.jsonl")]


def _said(result: Any) -> list[str]:
    return [row["outputs"]["said"] for row in read_jsonl(result.run_dir / "outputs.jsonl")]


def test_rows_the_cache_answers_are_finished_on_the_driver_and_never_sent(
    llm_server: LocalServer, workdir: Path
) -> None:
    flow = _flow(workdir)
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(12)])
    cache = workdir / "cache"
    first = flowkit.run(flow, data, cache_dir=cache, output="first", limit=8)
    llm_server.reset()
    again = flowkit.run(
        flow, data, cache_dir=cache, output="again", backend="threading", workers=2, chunk_size=2
    )
    # Only the 4 new rows' calls are paid; the 8 cached rows never left the driver's thread
    # (the workers are threads of a pool), the 4 new ones ran on the workers.
    paid = _paid(again)
    assert llm_server.stats()["chat_completions"] == len(paid) > 0
    assert {t["line"] for t in paid} == {8, 9, 10, 11}
    assert [w["main_thread"] for w in _where(again)] == [True] * 8 + [False] * 4
    assert _said(again)[:8] == _said(first)
    assert again.counts["rows"] == 12 and again.counts["succeeded"] == 12
    traces = read_jsonl(again.run_dir / "traces.jsonl")
    # The driver's 8 rows' two nodes each, and the new rows' second node where its input
    # repeats an earlier row's (the test server's replies do): found in the driver's cache by
    # the worker, as a local run finds it in its own.
    hits = [t for t in traces if t.get("cache_hit")]
    assert again.counts["cache_hits"] == len(hits) > 16
    assert sorted({t["line"] for t in hits if t["node"] == "first"}) == list(range(8))
    assert len(traces) == 12 * 3


@pytest.fixture
def elsewhere(_server: LocalServer, tmp_path: Path) -> Iterator[str]:
    """Two Dask worker processes whose cache folder is not the driver's (as on another machine:
    FLOWKIT_CACHE_DIR points them at a folder of their own)."""
    distributed = pytest.importorskip("distributed")
    env = {
        "OPENAI_BASE_URL": _server.base_url,
        "OPENAI_API_KEY": "sk-local-test",
        "FLOWKIT_MODEL": "flowkit-test",
        "FLOWKIT_CACHE_DIR": str(tmp_path / "workers-own-cache"),
    }
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", env=env
    ) as cluster:
        yield cluster.scheduler_address


@pytest.mark.slow
def test_dask_workers_that_cannot_see_the_drivers_cache_pay_only_for_misses(
    elsewhere: str, llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWKIT_CACHE_DIR", str(workdir / "drivers-cache"))
    flow = _flow(workdir)
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(20)])
    options: dict[str, Any] = {"backend": "dask", "scheduler": elsewhere, "chunk_size": 4}
    first = flowkit.run(flow, data, output="first", **options)
    assert llm_server.stats()["chat_completions"] == len(_paid(first)) >= 20
    assert {w["pid"] for w in _where(first)}.isdisjoint({os.getpid()})
    llm_server.reset()
    again = flowkit.run(flow, data, output="again", **options)
    assert llm_server.stats()["chat_completions"] == 0
    assert {w["pid"] for w in _where(again)} == {os.getpid()}
    assert _said(again) == _said(first)
    # The second prompt changed: the rows go out with the first node's entries, and the
    # workers pay for the second node alone.
    changed = flowkit.run(_flow(workdir, "Now lengthen:"), data, output="changed", **options)
    paid = _paid(changed)
    assert llm_server.stats()["chat_completions"] == len(paid) > 0
    assert {t["node"] for t in paid} == {"second"}
    assert {w["pid"] for w in _where(changed)}.isdisjoint({os.getpid()})
    assert read_json(changed.run_dir / "run.json")["status"] == "completed"


def _paid(result: Any) -> list[dict[str, Any]]:
    """The run's model calls that were not answered by a cache (its own or the driver's)."""
    traces = read_jsonl(result.run_dir / "traces.jsonl")
    return [t for t in traces if t["kind"] == "llm" and not t["cache_hit"]]


def test_rows_answered_on_the_driver_count_missing_keys_once(workdir: Path) -> None:
    write(workdir / "m.py", "def f(x: int) -> dict:\n    return {'a': x}\n")
    flow = write(
        workdir / "t.yaml",
        """
        name: t
        inputs: {x: {type: integer}}
        outputs: {b: ${n.output.b}}
        nodes:
          - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}
        """,
    )
    data = write_jsonl(workdir / "x.jsonl", [{"x": i} for i in range(5)])
    local = flowkit.run(flow, data, cache_dir=workdir / "cache", output="local")
    again = flowkit.run(
        flow, data, cache_dir=workdir / "cache", output="again", backend="threading", workers=2
    )
    assert again.counts["cache_hits"] == 5
    kept = read_json(local.run_dir / "run.json")
    assert read_json(again.run_dir / "run.json")["missing_keys"] == kept["missing_keys"]
    assert read_json(again.run_dir / "run.json")["notices"] == kept["notices"]


# Two model calls a row that do not read each other, the first declared first.
SIDE_BY_SIDE = """
    name: side_by_side
    inputs: {q: {type: string}}
    outputs: {one: ${one.output}, two: ${two.output}}
    nodes:
      - name: one
        type: llm
        messages: [{role: user, content: "ONE_PROMPT {{ q }}"}]
        inputs: {q: ${inputs.q}}
      - name: two
        type: llm
        messages: [{role: user, content: "Another view of {{ q }}"}]
        inputs: {q: ${inputs.q}}
    """


def test_a_missed_node_does_not_cost_the_cached_nodes_beside_it(
    llm_server: LocalServer, workdir: Path
) -> None:
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(6)])
    flow = write(workdir / "s.yaml", SIDE_BY_SIDE.replace("ONE_PROMPT", "Tell me about"))
    cache = workdir / "cache"
    flowkit.run(flow, data, cache_dir=cache, output="first")
    llm_server.reset()
    # The first node's prompt changed: its miss is met before the second node is looked up,
    # and the rows go out with the second node's entries all the same (as a local run, the
    # workers pay for the first node alone).
    write(workdir / "s.yaml", SIDE_BY_SIDE.replace("ONE_PROMPT", "Tell me all about"))
    changed = flowkit.run(
        flow, data, cache_dir=cache, output="changed", backend="threading", workers=2
    )
    paid = _paid(changed)
    assert {t["node"] for t in paid} == {"one"}
    assert llm_server.stats()["chat_completions"] == len(paid) == 6
    assert changed.counts["cache_hits"] == 6 and changed.counts["succeeded"] == 6


# Three model calls a row in a chain; the first one's reply is fixed by the test server's
# `[[reply: …]]` directive, so its prompt can change while its output does not.
CHAIN = """
    name: chain
    inputs: {q: {type: string}}
    outputs: {c: ${c.output}}
    nodes:
      - name: a
        type: llm
        messages: [{role: user, content: "FIRST_PROMPT [[reply: about {{ q }}]]"}]
        inputs: {q: ${inputs.q}}
      - name: b
        type: llm
        messages: [{role: user, content: "Shorten: {{ said }}"}]
        inputs: {said: ${a.output}}
      - name: c
        type: llm
        messages: [{role: user, content: "Grade: {{ said }}"}]
        inputs: {said: ${b.output}}
    """


def _chain(workdir: Path, first_prompt: str) -> Path:
    return write(workdir / "chain.yaml", CHAIN.replace("FIRST_PROMPT", first_prompt))


# loky starts its worker processes afresh (seconds): a stage of its own.
@pytest.mark.parametrize("backend", ["threading", pytest.param("loky", marks=pytest.mark.slow)])
def test_workers_ask_the_drivers_cache_for_keys_known_only_after_an_upstream_node_ran(
    backend: str, llm_server: LocalServer, workdir: Path
) -> None:
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(8)])
    cache = workdir / "cache"
    first = flowkit.run(_chain(workdir, "Tell me"), data, cache_dir=cache, output="first")
    llm_server.reset()
    # The first prompt changed, its reply did not: the driver cannot key `b` and `c` before
    # `a` has run on a worker, which then finds them in the driver's cache, as a local run
    # finds them in its own, and pays for `a` alone.
    options: dict[str, Any] = {"backend": backend, "workers": 2, "chunk_size": 2}
    edited = _chain(workdir, "Tell me please")
    changed = flowkit.run(edited, data, cache_dir=cache, output="changed", **options)
    paid = _paid(changed)
    assert {t["node"] for t in paid} == {"a"}
    assert llm_server.stats()["chat_completions"] == len(paid) == 8
    assert changed.counts["cache_hits"] == 16 and changed.counts["succeeded"] == 8
    assert changed.counts["cache_misses"] == 8
    assert _outputs(changed) == _outputs(first)


def _outputs(result: Any) -> list[Any]:
    return [row["outputs"] for row in read_jsonl(result.run_dir / "outputs.jsonl")]


@pytest.mark.cluster  # real clusters take seconds to start (a stage of .ci/run of its own)
@pytest.mark.parametrize("backend", ["dask", "ray"])
def test_cluster_workers_ask_the_drivers_cache_for_keys_known_only_after_an_upstream_node_ran(
    backend: str, llm_server: LocalServer, workdir: Path, tmp_path: Path
) -> None:
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(8)])
    cache = workdir / "cache"
    first = flowkit.run(_chain(workdir, "Tell me"), data, cache_dir=cache, output="first")
    llm_server.reset()
    edited = _chain(workdir, "Tell me please")
    # The workers' own cache folder is not the driver's, as on another machine.
    env = {k: os.environ[k] for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FLOWKIT_MODEL")} | {
        "FLOWKIT_CACHE_DIR": str(tmp_path / "workers-own-cache")
    }
    options: dict[str, Any] = {"cache_dir": cache, "output": "changed", "chunk_size": 2}
    if backend == "dask":
        distributed = pytest.importorskip("distributed")
        with distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", env=env
        ) as cluster:
            changed = flowkit.run(
                edited, data, backend="dask", scheduler=cluster.scheduler_address, **options
            )
    else:
        ray = pytest.importorskip("ray")
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": env},
        )
        try:
            changed = flowkit.run(edited, data, backend="ray", **options)
        finally:
            ray.shutdown()
    paid = _paid(changed)
    assert {t["node"] for t in paid} == {"a"}
    assert llm_server.stats()["chat_completions"] == len(paid) == 8
    assert changed.counts["cache_hits"] == 16
    assert _outputs(changed) == _outputs(first)
