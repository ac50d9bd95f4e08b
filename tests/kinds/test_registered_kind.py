"""A node kind from outside flowkit, registered with `@register` and nothing else: it loads,
validates with its own schema, caches and runs like a built-in one, and one that says it calls
an endpoint has the endpoint checked like an llm node's."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import CliRunner
from pydantic import Field

import flowkit
from flowkit import kinds
from flowkit.cli.main import main
from flowkit.engine.bound import BoundNode
from flowkit.errors import UsageError, ValidationError
from flowkit.flow.graph import Node
from flowkit.flow.loader import LoadContext
from flowkit.flow.spec import NodeSpec, PathText
from flowkit.kinds import Binding, Compiled, Kind, NodeResult, register
from flowkit.testing.server import LocalServer
from tests.support import read_jsonl, write, write_jsonl


class ShoutSpec(NodeSpec):
    type: Literal["shout"]
    times: int = Field(default=1, ge=1)
    """How many times the upper-cased text is repeated."""


class EchoModelSpec(NodeSpec):
    type: Literal["echo_model"]
    model: str | None = None
    """The model whose name the node outputs."""


CALLS: list[str] = []


@pytest.fixture
def shout() -> Iterator[None]:
    @register
    class ShoutKind(Kind):
        name = "shout"
        spec_model = ShoutSpec

        def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled:
            return Compiled(key_parts={"version": 1})

        def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: Any) -> NodeResult:
            CALLS.append(inputs["text"])
            return NodeResult(" ".join([inputs["text"].upper()] * node.spec.times))

    CALLS.clear()
    yield
    del kinds.KINDS["shout"]


@pytest.fixture
def echo_model() -> Iterator[None]:
    @register
    class EchoModelKind(Kind):
        name = "echo_model"
        spec_model = EchoModelSpec
        calls_endpoint = True

        def prepare(self, node: Node, ctx: Any) -> Binding:
            endpoint = ctx.model_settings().check(
                ctx.flow_name, node.name, None, node.spec.model, ctx.options.concurrency
            )
            return Binding(endpoint=endpoint, key_parts={"model": endpoint.model})

        def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: Any) -> NodeResult:
            return NodeResult(node.endpoint.model)

    yield
    del kinds.KINDS["echo_model"]


def test_a_registered_kind_loads_caches_and_runs(shout: None, tmp_path: Path) -> None:
    flow = write(
        tmp_path / "flow.yaml",
        """
        name: loud
        inputs: {text: {type: string}}
        outputs: {out: ${s.output}}
        nodes:
          - {name: s, type: shout, times: 2, inputs: {text: ${inputs.text}}}
        """,
    )
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "hi"}, {"text": "yo"}])
    kw: dict[str, Any] = {"cache_dir": tmp_path / "cache", "runs_root": tmp_path / "runs"}
    first = flowkit.run(flow, data, **kw)
    assert [r["outputs"]["out"] for r in first.rows()] == ["HI HI", "YO YO"]
    assert [t["kind"] for t in first.traces()] == ["shout", "shout"]
    again = flowkit.run(flow, data, **kw)
    assert [r["outputs"]["out"] for r in again.rows()] == ["HI HI", "YO YO"]
    assert [t["cache_hit"] for t in again.traces()] == [True, True]
    assert sorted(CALLS) == ["hi", "yo"]  # the second run ran nothing


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            "{name: x, type: shout, times: 0, inputs: {text: hi}}",
            "flow.yaml:3: node 'x': times: Input should be greater than or equal to 1",
        ),
        (
            "{name: x, type: shout, tims: 2, inputs: {text: hi}}",
            "flow.yaml:3: node 'x': unknown key 'tims' (did you mean 'times'?)",
        ),
        (
            "{name: x, type: shuot, inputs: {text: hi}}",
            "flow.yaml:3: node 'x': unknown node type 'shuot' (did you mean 'shout'?); "
            "expected one of python, llm, embedding, aggregate, flow, shout",
        ),
    ],
)
def test_a_registered_kind_validates_with_its_own_schema(
    shout: None, workdir: Path, node: str, message: str
) -> None:
    flow = write(workdir / "flow.yaml", f"name: f\nnodes:\n  - {node}\n")
    with pytest.raises(ValidationError) as info:
        flowkit.load_flow(flow)
    assert [str(d) for d in info.value.diagnostics] == [message]


def test_a_kind_that_calls_an_endpoint_has_it_checked_like_an_llm_node(
    echo_model: None, llm_server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow = write(
        tmp_path / "flow.yaml",
        """
        name: echo
        inputs: {x: {type: string}}
        outputs: {model: ${e.output}}
        nodes:
          - {name: e, type: echo_model, inputs: {x: ${inputs.x}}}
        """,
    )
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": "a"}])
    kw: dict[str, Any] = {"cache_dir": tmp_path / "cache", "runs_root": tmp_path / "runs"}
    result = flowkit.run(flow, data, **kw)
    assert [r["outputs"]["model"] for r in result.rows()] == ["flowkit-test"]
    monkeypatch.delenv("FLOWKIT_MODEL")
    with pytest.raises(UsageError) as info:
        flowkit.run(flow, data, **kw)
    assert str(info.value).startswith("flow 'echo' node 'e' needs a model, but none is set")


PLUGIN = """
from typing import Literal

from flowkit.flow.spec import NodeSpec, PathText
from flowkit.kinds import Kind, NodeResult


class WhisperSpec(NodeSpec):
    type: Literal["whisper"]


class WhisperKind(Kind):
    name = "whisper"
    spec_model = WhisperSpec

    def run_sync(self, node, inputs, ctx):
        return NodeResult(inputs["text"].lower())
"""


@pytest.fixture
def whisper_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An installed package (as pip leaves one) offering a kind through the entry-point group."""
    site = tmp_path / "site"
    write(site / "whisper_kind.py", PLUGIN)
    info = site / "whisper_kind-1.0.dist-info"
    write(info / "METADATA", "Metadata-Version: 2.1\nName: whisper-kind\nVersion: 1.0\n")
    write(info / "entry_points.txt", "[flowkit.kinds]\nwhisper = whisper_kind:WhisperKind\n")
    monkeypatch.syspath_prepend(str(site))
    yield
    kinds.KINDS.pop("whisper", None)
    monkeypatch.delitem(sys.modules, "whisper_kind", raising=False)


def test_an_installed_package_offers_a_kind_to_the_command_line(
    whisper_package: None, workdir: Path
) -> None:
    write(
        workdir / "flow.yaml",
        """
        name: quiet
        inputs: {text: {type: string}}
        outputs: {out: ${w.output}}
        nodes:
          - {name: w, type: whisper, inputs: {text: ${inputs.text}}}
          - {name: v, type: whispr, inputs: {text: ${inputs.text}}}
        """,
    )
    result = CliRunner().invoke(main, ["validate", "flow.yaml"])
    assert result.exit_code == 2
    assert result.stderr.splitlines()[1:] == [
        "flow.yaml:6: node 'v': unknown node type 'whispr' (did you mean 'whisper'?); "
        "expected one of python, llm, embedding, aggregate, flow, whisper"
    ]
    write(workdir / "flow.yaml", (workdir / "flow.yaml").read_text().rsplit("  - {name: v", 1)[0])
    write_jsonl(workdir / "d.jsonl", [{"text": "HUSH"}])
    result = CliRunner().invoke(main, ["run", "flow.yaml", "--data", "d.jsonl", "-q"])
    assert result.exit_code == 0, result.output
    outputs = read_jsonl(next(workdir.glob("runs/*/outputs.jsonl")))
    assert [r["outputs"]["out"] for r in outputs] == ["hush"]


class BannerSpec(NodeSpec):
    type: Literal["banner"]
    file: PathText
    """A text file, relative to the file the node is written in, put before the input."""


@pytest.fixture
def banner() -> Iterator[None]:
    @register
    class BannerKind(Kind):
        name = "banner"
        spec_model = BannerSpec
        path_fields = ("file",)

        def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
            path = base_dir / node.spec.file
            if not path.is_file():
                ctx.error(node, f"no file {node.spec.file}", key="file")
                return None
            text = path.read_text("utf-8")
            return Compiled(impl=text, key_parts={"banner": text})

        def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: Any) -> NodeResult:
            return NodeResult(node.impl + inputs["text"])

    yield
    del kinds.KINDS["banner"]


def test_a_kinds_path_fields_are_relative_to_the_file_they_are_written_in(
    banner: None, tmp_path: Path
) -> None:
    write(tmp_path / "shared" / "hello.txt", "hello, ")
    write(tmp_path / "shared" / "banner.yaml", "type: banner\nfile: hello.txt\n")
    flow = write(
        tmp_path / "flows" / "flow.yaml",
        """
        name: greet
        inputs: {text: {type: string}}
        outputs: {out: ${b.output}}
        nodes:
          - {name: b, use: ../shared/banner.yaml, inputs: {text: ${inputs.text}}}
        """,
    )
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "you"}])
    kw: dict[str, Any] = {"cache_dir": tmp_path / "cache", "runs_root": tmp_path / "runs"}
    assert [r["outputs"]["out"] for r in flowkit.run(flow, data, **kw).rows()] == ["hello, you"]
    # The path stays out of the key and the file's content is in it: an edit reruns the node.
    write(tmp_path / "shared" / "hello.txt", "hi, ")
    assert [r["outputs"]["out"] for r in flowkit.run(flow, data, **kw).rows()] == ["hi, you"]


def test_a_kind_without_a_schema_or_with_a_path_field_it_lacks_is_refused() -> None:
    class Bare(Kind):
        name = "bare"

    class Misnamed(Kind):
        name = "misnamed"
        spec_model = BannerSpec
        path_fields = ("path",)

    with pytest.raises(TypeError, match="needs spec_model, a subclass of"):
        register(Bare)
    with pytest.raises(TypeError, match=r"path_fields \['path'\] are not spec fields"):
        register(Misnamed)
    assert "bare" not in kinds.KINDS and "misnamed" not in kinds.KINDS


def test_a_kind_cannot_take_a_built_in_or_registered_type() -> None:
    # A flow that uses the built-in type imports the built-in kind, which would register itself
    # over the user's in the middle of a run; two kinds under one type would do the same.
    class Impostor(Kind):
        name = "python"
        spec_model = ShoutSpec

    class Other(Kind):
        name = "shout"
        spec_model = ShoutSpec

    with pytest.raises(TypeError) as refused:
        register(Impostor)
    assert str(refused.value) == (
        "node kind Impostor: 'python' is a built-in node type; give the kind a name of its own"
    )
    assert type(kinds.get("python")).__name__ == "PythonKind"

    @register
    class Shout(Kind):
        name = "shout"
        spec_model = ShoutSpec

    try:
        with pytest.raises(TypeError, match="type 'shout' is already registered by "):
            register(Other)
        register(Shout)  # the same kind again (a notebook cell run twice) is fine
    finally:
        del kinds.KINDS["shout"]


class BoomSpec(NodeSpec):
    type: Literal["boom"]
    at: Literal["compile", "prepare"] = "compile"
    """Where the kind raises."""


def test_a_kind_that_raises_is_a_node_problem_not_a_traceback(tmp_path: Path) -> None:
    @register
    class BoomKind(Kind):
        name = "boom"
        spec_model = BoomSpec

        def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled:
            if node.spec.at == "compile":
                raise RuntimeError("compile exploded")
            return Compiled()

        def prepare(self, node: Node, ctx: Any) -> Binding:
            raise RuntimeError("prepare exploded")

    try:
        flow = write(tmp_path / "flow.yaml", "name: f\nnodes:\n  - {name: b, type: boom}\n")
        with pytest.raises(ValidationError) as info:
            flowkit.load_flow(flow)
        assert [str(d) for d in info.value.diagnostics] == [
            f"{flow}:3: node 'b': node type 'boom' failed: RuntimeError: compile exploded"
        ]
        write(flow, "name: f\nnodes:\n  - {name: b, type: boom, at: prepare}\n")
        data = write_jsonl(tmp_path / "d.jsonl", [{}])
        with pytest.raises(UsageError) as refused:
            flowkit.run(flow, data, cache_dir=tmp_path / "cache", runs_root=tmp_path / "runs")
        assert str(refused.value) == (
            "flow 'f' node 'b': node type 'boom' failed: RuntimeError: prepare exploded"
        )
        assert not (tmp_path / "runs").exists()  # refused before any row
    finally:
        del kinds.KINDS["boom"]
