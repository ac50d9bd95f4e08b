"""Flows sent to workers by content (flowkit.runs.bundle): a worker needs none of the driver's
files at the driver's paths."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import flowkit
from flowkit.flow.graph import Flow
from flowkit.flow.loader import load_flow
from flowkit.llm.config import load_settings
from flowkit.llm.leaseserver import serve_leases
from flowkit.llm.session import LlmSession
from flowkit.runs.backends import WorkerJob, run_chunk
from flowkit.runs.bundle import pack, unpack
from flowkit.runs.config import RunConfig
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write

FLOW = """
    name: moved
    inputs: {q: {type: string}}
    outputs: {said: ${judge.output}, size: ${size.output}}
    nodes:
      - {name: judge, type: llm, prompt: ../prompts/say.jinja2, inputs: {q: ${inputs.q}}}
      - {name: size, type: python, source: code.py, function: size, inputs: {s: ${judge.output}}}
    """


def _project(root: Path) -> Path:
    write(root / "prompts" / "say.jinja2", "user:\nSay something about {{ q }}\n")
    write(root / "flows" / "code.py", "from helper import double\n\ndef size(s: str) -> int:\n")
    with (root / "flows" / "code.py").open("a") as f:
        f.write("    return double(len(s))\n")
    write(root / "flows" / "helper.py", "def double(n: int) -> int:\n    return 2 * n\n")
    write(root / "data.jsonl", '{"q": "x"}\n')  # beside the flow's folder, not in it: not sent
    return write(root / "flows" / "moved.yaml", FLOW)


@pytest.mark.cluster  # a fresh worker process takes seconds to start
def test_a_worker_elsewhere_runs_a_flow_whose_folder_is_gone(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """The driver packs the flow; its folder is then moved away, and a fresh process in another
    working directory runs a chunk of it as the driver would have."""
    path = _project(tmp_path / "project")
    rows = [{"q": "rivers"}, {"q": "cities"}]
    local = flowkit.run(str(path), rows, use_cache=False, output=str(tmp_path / "local"))
    flow = load_flow(path)
    job = WorkerJob(pack(flow), RunConfig(use_cache=False), "r", flow.content_hash)
    (tmp_path / "project").rename(tmp_path / "moved-away")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spawn = multiprocessing.get_context("spawn")
    # The driver serves its model settings and budgets to the worker, as a run does.
    settings = load_settings(project_dir=tmp_path / "moved-away")
    with (
        serve_leases(LlmSession(), settings) as ticket,
        cf.ProcessPoolExecutor(1, spawn, initializer=os.chdir, initargs=(elsewhere,)) as worker,
    ):
        job = dataclasses.replace(job, lease=ticket)
        chunk = worker.submit(run_chunk, job, [(i, row, None) for i, row in enumerate(rows)])
        result = chunk.result(timeout=60)
    outputs = [record["outputs"] for _, record in sorted(result.rows)]
    assert outputs == [r["outputs"] for r in read_jsonl(local.run_dir / "outputs.jsonl")]
    assert all(o["size"] > 0 for o in outputs)


def test_what_a_flow_file_sends(tmp_path: Path) -> None:
    path = _project(tmp_path)
    bundle = pack(load_flow(path))
    assert bundle.entries == (("file", "flows/moved.yaml"),)
    assert [name for name, _ in bundle.files] == [
        "flows/code.py",
        "flows/helper.py",
        "flows/moved.yaml",
        "prompts/say.jinja2",
    ]
    [unpacked] = unpack(bundle)
    assert Path(unpacked).read_text() == path.read_text()
    assert load_flow(unpacked).content_hash == load_flow(path).content_hash


def test_a_cache_folder_in_the_flows_folder_is_not_sent_and_threads_unpack_at_once(
    tmp_path: Path,
) -> None:
    path = _project(tmp_path)
    write(path.parent / "cache" / "endpoints.json", "{}")  # --cache-dir flows/cache
    write(path.parent / "cache" / "notes.txt", "a run writes here while workers unpack")
    write(path.parent / "this.txt", str(tmp_path))  # a digest of its own: unpacked afresh
    bundle = pack(load_flow(path))
    assert not [name for name, _ in bundle.files if "cache" in name]
    with cf.ThreadPoolExecutor(8) as pool:  # the threading backend's workers share a pid
        found = list(pool.map(lambda _: unpack(bundle), range(8)))
    assert all(f == found[0] for f in found)


def test_a_use_node_whose_file_names_code_loads_the_same_flow_from_a_bundle(
    tmp_path: Path,
) -> None:
    """A `use:` node file's `source:` (relative to that file) entered the flow's content as an
    absolute path: a worker that unpacked the flow elsewhere got another content hash and
    refused to run ("got different nodes, prompts or code than the driver")."""
    write(tmp_path / "lib" / "shout.py", "def shout(s: str) -> str:\n    return s.upper()\n")
    write(tmp_path / "nodes" / "loud.yaml", "type: python\nsource: ../lib/shout.py\n")
    path = write(
        tmp_path / "flows" / "f.yaml",
        """
        name: f
        inputs: {q: {type: string}}
        outputs: {loud: ${loud.output}}
        nodes:
          - {name: loud, use: ../nodes/loud.yaml, function: shout, inputs: {s: ${inputs.q}}}
        """,
    )
    flow = load_flow(path)
    [unpacked] = unpack(pack(flow))
    assert load_flow(unpacked).content_hash == flow.content_hash


def test_threads_of_one_process_unpack_a_flow_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threading backend's workers share a process id: their partial files had one name,
    and one thread's rename took the other's file (FileNotFoundError, a flaky failed run)."""
    import tempfile
    import threading

    bundle = pack(load_flow(_project(tmp_path / "project")))
    for round_ in range(20):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / f"tmp{round_}"))
        (tmp_path / f"tmp{round_}").mkdir()
        start = threading.Barrier(8)

        def unpack_at_once(start: threading.Barrier) -> list[str]:
            start.wait()
            return unpack(bundle)

        with cf.ThreadPoolExecutor(8) as pool:
            found = [f.result() for f in [pool.submit(unpack_at_once, start) for _ in range(8)]]
        assert all(each == found[0] for each in found)


def test_a_built_in_flow_travels_by_name() -> None:
    bundle = pack(load_flow("f1_score"))
    assert (bundle.entries, bundle.files) == ((("builtin", "f1_score"),), ())
    assert unpack(bundle) == ["f1_score"]


def test_a_flow_folder_too_big_to_send_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flowkit.runs.bundle as bundle

    path = _project(tmp_path)
    monkeypatch.setattr(bundle, "MAX_TOTAL", 100)
    with pytest.raises(flowkit.UsageError) as raised:
        pack(load_flow(path))
    size = sum(
        len(p.read_bytes()) for p in tmp_path.rglob("*") if p.suffix in (".py", ".yaml", ".jinja2")
    )
    assert raised.value.message == (
        f"the flow's files under {tmp_path} come to {size:,} bytes; workers get a flow by "
        "content, at most 100 bytes"
    )


def test_a_flow_too_big_to_send_is_refused_before_the_run_folder_exists(
    llm_server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flowkit.runs.bundle as bundle

    path = _project(tmp_path)
    monkeypatch.setattr(bundle, "MAX_TOTAL", 100)
    with pytest.raises(flowkit.UsageError) as raised:
        flowkit.run(
            str(path), [{"q": "x"}], output=str(tmp_path / "big"), backend="threading", workers=2
        )
    size = sum(
        len(p.read_bytes()) for p in tmp_path.rglob("*") if p.suffix in (".py", ".yaml", ".jinja2")
    )
    assert raised.value.message == (
        f"the flow's files under {tmp_path} come to {size:,} bytes; workers get a flow by "
        "content, at most 100 bytes"
    )
    assert not (tmp_path / "big").exists()


@pytest.mark.cluster  # a fresh worker process takes seconds to start
@pytest.mark.parametrize("target", ["app.py:answer", "app:answer", "app.yaml"])
def test_a_worker_elsewhere_runs_a_target_whose_folder_is_gone(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--target's app travels by content as the flow does: the driver's working directory is
    moved away, and a fresh process elsewhere calls the app as the driver did."""
    from flowkit.flow.target import with_target
    from tests.flow.test_target import APP, APP_FLOW

    project = tmp_path / "project"
    write(project / "app.py", APP)
    write(project / "app.yaml", APP_FLOW)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    rows = [{"question": f"Capital of {c}?", "ground_truth": "Paris."} for c in ("France", "Mars")]
    local = flowkit.run("f1_score", rows, target=target, use_cache=False, output="local")
    expected = [r["outputs"]["score"] for r in read_jsonl(local.run_dir / "outputs.jsonl")]
    flow = with_target(load_flow("f1_score"), target, ("question", "ground_truth"), project)
    job = WorkerJob(
        pack(flow), RunConfig(use_cache=False), "r", flow.content_hash, target=flow.target
    )
    monkeypatch.chdir(tmp_path)
    project.rename(tmp_path / "moved-away")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spawn = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(1, spawn, initializer=os.chdir, initargs=(elsewhere,)) as worker:
        # Mapped as the driver maps them: the flow's optional inputs with their defaults.
        defaults = {k: spec.default for k, spec in flow.inputs.items() if not spec.required}
        mapped = [(i, {**defaults, **row}, None) for i, row in enumerate(rows)]
        result = worker.submit(run_chunk, job, mapped).result(timeout=60)
    scores = [record["outputs"]["score"] for _, record in sorted(result.rows)]
    assert scores == expected == [1.0, 0.0]


APP_WITH_LIB = "from applib import shout\n\ndef answer(question):\n    return shout(question)\n"
METRIC = """
    name: metric
    inputs: {question: {type: string}, answer: {type: string}}
    outputs: {n: ${n.output}}
    nodes:
      - {name: n, type: python, source: ../code/n.py, function: n, inputs: {s: ${inputs.answer}}}
    """


def _as_worker(driver: Path, build: Callable[[list[str], Path], Flow]) -> tuple[str, str]:
    """(the driver's content hash, a worker's) of the flow ``build(flows, base)`` makes, the
    worker loading it from the folder it unpacked the driver's files into."""
    from flowkit.runs.bundle import target_base

    flow = build([str(driver / "flows" / "metric.yaml"), "f1_score"], driver)
    bundle = pack(flow)
    worker = build(unpack(bundle), target_base(bundle) or driver)
    return flow.content_hash, worker.content_hash


@pytest.mark.parametrize("target", [None, "app.yaml", "app.py:answer", "app:answer"])
def test_a_composed_or_target_wrapped_flow_loads_the_same_from_a_bundle(
    target: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flow flowkit writes around others (`flowkit run A B`, and any flow with --target)
    named each sub-flow by its absolute path, and those paths entered its content hash: a
    worker loads a flow file from the folder it unpacked it into, and a built-in flow from its
    own flowkit, so every worker refused a composed flow file or a flow file with --target, on
    every backend ("got different nodes, prompts or code than the driver")."""
    import sys

    from flowkit.flow.loader import load_flows
    from flowkit.flow.target import with_target

    project = tmp_path / "project"
    write(project / "flows" / "metric.yaml", METRIC)
    write(project / "code" / "n.py", "def n(s: str) -> int:\n    return len(s)\n")
    write(project / "app.py", APP_WITH_LIB)
    write(project / "applib.py", "def shout(s: str) -> str:\n    return s.upper()\n")
    write(
        project / "app.yaml",
        "name: app\ninputs: {question: {type: string}}\n"
        "outputs: {answer: '${a.output}'}\nnodes:\n  - {name: a, type: python, source: "
        "app.py, function: answer, inputs: {question: '${inputs.question}'}}\n",
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)

    def build(flows: list[str], base: Path) -> Flow:
        flow = load_flows(list(flows))
        if target is None:
            return flow
        return with_target(flow, target, ("question", "ground_truth"), base)

    driver, worker = _as_worker(project, build)
    assert worker == driver


def test_a_built_in_flow_composed_loads_the_same_where_flowkit_is_installed_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`flowkit run groundedness coherence` on a worker whose flowkit is installed at another
    path: the composed flow named each built-in by the driver's path to it."""
    import shutil

    import flowkit.flow.builtin as builtin
    from flowkit.flow.loader import load_flows

    flows: list[str | os.PathLike[str]] = ["f1_score", "groundedness"]
    driver = load_flows(list(flows))
    bundle = pack(driver)
    here = builtin.builtin_dirs()
    elsewhere = tmp_path / "site-packages" / "flowkit"
    for folder in here:
        shutil.copytree(folder, elsewhere / folder.name)
        shutil.copytree(folder.parent / "prompts", elsewhere / "prompts", dirs_exist_ok=True)
    monkeypatch.setattr(builtin, "builtin_dirs", lambda: [elsewhere / d.name for d in here])
    worker = load_flows(list(unpack(bundle)))
    assert str(tmp_path) in str(worker.nodes["f1_score"].impl.path)
    assert worker.content_hash == driver.content_hash
