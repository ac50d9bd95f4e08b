"""Loading a flow file: YAML → specs → compiled nodes → a checked DAG.

Every problem is collected, not raised at the first one, and reported together with its file
and line. `use:` nodes are merged first (flowkit.flow.use); `type: flow` nodes load their sub-flow
through the same context, so one report covers the whole tree of files.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError as PydanticError

from flowkit.cache.canonical import canonical_bytes
from flowkit.code import freshness, importpath
from flowkit.code.imports import ModuleClaims, recording_names
from flowkit.errors import Diagnostic, ValidationError, display
from flowkit.flow.builtin import resolve_flow_path
from flowkit.flow.formats import foreign_file, translator
from flowkit.flow.graph import Flow, Node, build_graph, find_cycle, ordered, when_clause
from flowkit.flow.node_key import declared_env, static_key
from flowkit.flow.refs import Ref, RefSyntaxError, parse_flow_ref
from flowkit.flow.source import (
    YamlSyntaxError,
    YDict,
    YList,
    is_file,
    line_of,
    locate,
    read_yaml,
)
from flowkit.flow.spec import FlowSpec, InputSpec, NodeSpec, parse_node
from flowkit.flow.spec_messages import message as schema_message
from flowkit.flow.spec_messages import node_keys
from flowkit.flow.use import merge_use
from flowkit.flow.variants import applied as apply_variants
from flowkit.flow.wiring import check_metric_keys, check_outputs, check_refs

__all__ = ["LoadContext", "load_flow", "load_flows", "static_key"]


class LoadContext:
    """Collects diagnostics and loaded flows while one top-level flow is read."""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self._stack: list[Path] = []
        self._loaded: dict[Path, Flow | None] = {}
        self._raw: dict[tuple[str, str], YDict] = {}
        """Each node's YAML by (file, node name), for the line of a key in its messages."""
        self.broken: set[str] = set()
        """Nodes already reported as invalid: references to them raise no second error."""
        self.modules = ModuleClaims()
        """The file of each module name the tree's code reaches: two for one name are refused."""

    # -- reporting ------------------------------------------------------------------------
    def report(self, file: str, line: int, node: str | None, message: str) -> None:
        self.diagnostics.append(Diagnostic(file, line, node, message))

    def where(self, node: Node, key: str | None = None) -> str:
        """``flow.yaml:LINE`` of the node (of its ``key`` when known), for messages that are
        reported at another file, such as a prompt's."""
        raw = self._raw.get((node.file, node.name))
        line = (line_of(raw, key) if raw is not None and key is not None else 0) or node.line
        return f"{node.file}:{line}"

    def error(self, node: Node, message: str, key: str | None = None, sub: Any = None) -> None:
        """Report against a node, at the line of ``key`` (and ``sub`` inside it) when known."""
        raw = self._raw.get((node.file, node.name))
        line = node.line
        if raw is not None and key is not None:
            line = line_of(raw, key) or line
            inner = raw.get(key)
            if sub is not None and isinstance(inner, (YDict, YList)):
                line = line_of(inner, sub) or line
        self.report(node.file, line, node.name, message)

    # -- loading --------------------------------------------------------------------------
    @property
    def chain(self) -> list[Path]:
        """The flow files being read, outermost first: the sub-flow being loaded is last."""
        return list(self._stack)

    def load(self, path: Path) -> Flow | None:
        try:
            path = path.resolve()
        except (OSError, ValueError) as err:  # a NUL in the name, a loop of symlinks
            if self._stack:
                message = f"cannot open sub-flow '{_shown(path)}': {_why(err)}"
                self.report(display(self._stack[-1]), 0, None, message)
            else:
                self.report(_shown(path), 0, None, f"cannot open: {_why(err)}")
            return None
        if path in self._stack:
            chain = " → ".join(display(p) for p in [*self._stack[self._stack.index(path) :], path])
            self.report(display(self._stack[-1]), 0, None, f"flows include each other: {chain}")
            return None
        if path in self._loaded:
            return self._loaded[path]
        self._stack.append(path)
        try:
            flow = self._load(path)
        finally:
            self._stack.pop()
        self._loaded[path] = flow
        return flow

    def _load(self, path: Path) -> Flow | None:
        foreign = foreign_file(path)
        if foreign is not None:
            raw = translator(foreign).translate(foreign, self)
            return None if raw is None else self.build(raw, foreign, display(foreign))
        file = display(path)
        if not is_file(path):
            self.report(file, 0, None, "flow file does not exist")
            return None
        try:
            raw = read_yaml(path, file)
        except YamlSyntaxError as err:
            self.diagnostics.append(err.diagnostic)
            return None
        except UnicodeDecodeError as err:
            self.report(file, 0, None, f"flow file is not UTF-8 text ({err.reason})")
            return None
        except OSError as err:
            self.report(file, 0, None, f"cannot read flow file: {err.strerror or err}")
            return None
        if not isinstance(raw, YDict):
            self.report(
                file, 1, None, "a flow file must be a mapping with name, inputs, outputs, nodes"
            )
            return None
        return self.build(raw, path, file)

    def build(self, raw: YDict, path: Path, file: str) -> Flow | None:
        """Validate and compile one flow's parsed YAML (``path`` anchors relative paths)."""
        start = len(self.diagnostics)
        spec, raw_nodes = self._header(raw, file)
        folders = (
            importpath.resolve([".", *spec.python_path], path.parent) if spec is not None else ()
        )
        with importpath.importable(folders):
            nodes = self._nodes(raw_nodes, path, file)
        for node in nodes.values():  # a sub-flow's folders are needed while this one runs
            folders += getattr(node.impl, "import_path", ()) if node.kind == "flow" else ()
        if spec is None:
            return None
        spec = spec.model_copy(update={"nodes": [n.spec for n in nodes.values()]})
        outputs = check_outputs(self, spec, raw, nodes, file)
        check_refs(self, spec, nodes)
        check_metric_keys(self, nodes, spec.name)
        graph = build_graph(nodes)
        if (cycle := find_cycle(graph)) is not None:
            first = nodes[cycle[0]]
            self.report(file, first.line, cycle[0], "cycle: " + " → ".join(cycle))
        if len(self.diagnostics) > start:
            return None
        position = {name: i for i, name in enumerate(nodes)}
        row = [n for n in nodes if not nodes[n].is_aggregate]
        agg = [n for n in nodes if nodes[n].is_aggregate]
        digest = _digest(spec.model_dump(mode="json"), nodes)
        return Flow(
            spec,
            path,
            MappingProxyType(nodes),
            MappingProxyType(outputs),
            tuple(ordered(graph, row, position)),
            tuple(ordered(graph, agg, position)),
            digest,
            graph,
            import_path=tuple(dict.fromkeys(folders)),
        )

    def _header(self, raw: YDict, file: str) -> tuple[FlowSpec | None, list[Any]]:
        raw_nodes = raw.get("nodes", [])
        if not isinstance(raw_nodes, list):
            self.report(file, raw.line_of("nodes"), None, "'nodes' must be a list of nodes")
            raw_nodes = []
        header = {k: v for k, v in raw.items() if k not in ("nodes", "inputs")}
        raw_outputs = raw.get("outputs")
        if isinstance(raw_outputs, dict):
            # Said in words here, and left out, so the rest of the flow is still checked.
            for name, value in raw_outputs.items():
                if not isinstance(value, str):
                    what = "refers to nothing: it" if value is None else "is not text: it"
                    self.report(
                        file,
                        line_of(raw_outputs, name),
                        None,
                        f"output {name!r} {what} must be a reference such as "
                        "${node.output} or ${inputs.name}",
                    )
            header["outputs"] = {k: v for k, v in raw_outputs.items() if isinstance(v, str)}
        inputs: dict[str, InputSpec] = {}
        raw_inputs = raw.get("inputs") or {}
        if not isinstance(raw_inputs, dict):
            self.report(file, raw.line_of("inputs"), None, "'inputs' must map names to {type: …}")
            raw_inputs = {}
        for name, value in raw_inputs.items():
            try:
                inputs[name] = InputSpec.model_validate(value if value is not None else {})
            except PydanticError as err:
                # Keep the name with type 'any', so references to it raise no second error.
                inputs[name] = InputSpec()
                self._pydantic(err, raw, file, None, list(InputSpec.model_fields), ("inputs", name))
        try:
            spec = FlowSpec.model_validate({**header, "inputs": inputs})
        except PydanticError as err:
            self._pydantic(err, raw, file, None, [*FlowSpec.model_fields], ())
            return None, raw_nodes
        return spec, raw_nodes

    def _pydantic(
        self,
        err: PydanticError,
        raw: Any,
        file: str,
        node: str | None,
        allowed: list[str],
        prefix: tuple[Any, ...],
    ) -> None:
        for e in err.errors():
            loc = (*prefix, *e["loc"])
            _, line = locate(raw, loc)
            self.report(file, line, node, schema_message({**e, "loc": loc}, allowed))

    def _nodes(self, raw_nodes: list[Any], path: Path, file: str) -> dict[str, Node]:
        nodes: dict[str, Node] = {}
        seen: dict[str, int] = {}
        lines = getattr(raw_nodes, "item_lines", [])
        for i, raw in enumerate(raw_nodes):
            line = lines[i] if i < len(lines) else 0
            if not isinstance(raw, dict):
                self.report(file, line, None, "a node must be a mapping with a name and a type")
                continue
            name = raw.get("name") if isinstance(raw.get("name"), str) else None
            if name is not None and name in seen:
                self.report(
                    file, line, name, f"duplicate node name (first defined at line {seen[name]})"
                )
                continue
            if name is not None:
                seen[name] = line
            if "use" in raw:
                merged = merge_use(self, raw, path, file, name)
                if merged is None:
                    continue
                raw = merged
            if "variants" in raw:  # the chosen variant's prompt, model and params
                varied = apply_variants(self, raw, file, name)
                if varied is None:
                    self.broken.add(name or "")
                    continue
                raw = varied
            try:
                spec = parse_node(raw, _spec_model)
            except PydanticError as err:
                self._pydantic(err, raw, file, name, node_keys(raw), ())
                if name:
                    self.broken.add(name)
                continue
            node = self._compile(Node(spec.name, spec.type, spec, file, line, ()), raw)
            nodes[spec.name] = self._compile_kind(node, path.parent)
        return nodes

    def _compile(self, bare: Node, raw: YDict) -> Node:
        """The node with its references parsed; its kind compiles it next (``_compile_kind``)."""
        self._raw[(bare.file, bare.name)] = raw
        spec = bare.spec
        inputs = tuple((p, *self._ref(bare, v, "inputs", p)) for p, v in spec.inputs.items())
        when = None
        if spec.when is not None:
            try:
                when = when_clause(spec.when, _must_ref)
            except (RefSyntaxError, ValueError) as err:
                self.error(bare, f"when: {err}", key="when")
        node = replace(bare, inputs=inputs, when=when)
        return replace(node, deps=frozenset(r.name for r in node.refs() if r.source == "node"))

    def _compile_kind(self, node: Node, base_dir: Path) -> Node:
        """Build the node complete from what its kind compiled (a frozen node is never edited
        afterwards), with the load-time part of its cache key."""
        # Kinds are an extension point that imports this package: looked up, not imported at top.
        from flowkit import kinds

        with recording_names() as reached:
            try:
                compiled = kinds.get(node.kind).compile(node, base_dir, self)
            except Exception as err:  # a kind's own bug: this node's problem, not a traceback
                self.error(node, f"node type {node.kind!r} failed: {type(err).__name__}: {err}")
                compiled = None
        key = "source" if getattr(node.spec, "source", None) else "function"
        for clash in self.modules.claim(reached, f"node {node.name!r} ({self.where(node)})"):
            self.error(node, clash, key=key)
        if compiled is None:  # reported: the flow will not load
            return node
        parts = MappingProxyType({**compiled.key_parts, **declared_env(node.spec)})
        done = replace(node, impl=compiled.impl, key_parts=parts, is_async=compiled.is_async)
        return replace(done, static_key=static_key(done))

    def _ref(self, node: Node, value: Any, key: str, sub: Any) -> tuple[Ref | None, Any]:
        try:
            return parse_flow_ref(value), value
        except RefSyntaxError as err:
            self.error(node, str(err), key=key, sub=sub)
            return None, value


def _spec_model(kind: str) -> type[NodeSpec] | None:
    """The model a node of type ``kind`` is validated with; None if no kind has that name."""
    from flowkit import kinds

    found = kinds.find(kind)
    return None if found is None else found.spec_model


def _must_ref(text: str) -> Ref:
    ref = parse_flow_ref(text)
    if ref is None:
        raise ValueError(f"{text!r} is not a reference; write ${{node.output}} or ${{inputs.x}}")
    return ref


def _raise(ctx: LoadContext, name: str) -> None:
    if ctx.diagnostics:
        raise ValidationError(ctx.diagnostics)


def _flow_path(flow: str | os.PathLike[str]) -> Path:
    """The flow's file (a path, or a built-in flow's name); a name the OS refuses is reported."""
    try:
        return resolve_flow_path(flow).resolve()
    except (OSError, ValueError) as err:
        raise ValidationError(
            [Diagnostic(_shown(flow), 0, None, f"cannot open: {_why(err)}")]
        ) from None


def _shown(path: str | os.PathLike[str]) -> str:
    """A path fit for a message: control characters escaped, at most 80 characters."""
    text = (
        str(path).encode("unicode_escape").decode("ascii")
        if not str(path).isprintable()
        else str(path)
    )
    return text if len(text) <= 80 else text[:77] + "..."


def _why(err: Exception) -> str:
    """An OS error's reason without the (perhaps huge) file name it repeats."""
    return getattr(err, "strerror", None) or str(err)


def load_flows(flows: list[str | os.PathLike[str]]) -> Flow:
    """One flow as it is, several composed into one run (the CLI's and workers' rule)."""
    if len(flows) == 1:
        return load_flow(flows[0])
    from flowkit.flow.compose import compose  # it builds on this module

    return compose(flows)


def load_flow(flow: str | os.PathLike[str]) -> Flow:
    """Load and validate a flow (a path, or a built-in flow's name); raise every problem at once."""
    ctx = LoadContext()
    path = _flow_path(flow)
    with freshness.recording() as seen:
        loaded = ctx.load(path)
    if ctx.diagnostics or loaded is None:
        raise ValidationError(
            ctx.diagnostics or [Diagnostic(str(flow), 0, None, "flow failed to load")]
        )
    return replace(loaded, sources=(str(path.resolve()),), code_files=tuple(sorted(seen.items())))


def _digest(spec: dict[str, Any], nodes: Mapping[str, Node]) -> str:
    return hashlib.sha256(
        canonical_bytes({"spec": spec, "nodes": {n: v.static_key for n, v in nodes.items()}})
    ).hexdigest()


def without_paths(flow: Flow) -> Flow:
    """``flow``, a flow flowkit wrote itself around others (several flows composed, a metric
    flow wrapped around ``--target``), with a content hash that names each sub-flow by what it
    is (the sub-flow's own content hash, which its node's key holds already), not by the path
    this host has it at: a built-in flow lies wherever flowkit is installed, and a worker loads
    a flow file from the folder it unpacked the driver's files into, so the absolute paths the
    wrapper's nodes carry differ from the driver's, while the flows are the same."""
    spec = flow.spec.model_dump(mode="json")
    for raw in spec.get("nodes", []):
        node = flow.nodes.get(raw.get("name"))
        if node is not None and node.kind == "flow" and node.impl is not None:
            raw["flow"] = node.impl.content_hash
    return replace(flow, content_hash=_digest(spec, flow.nodes))
