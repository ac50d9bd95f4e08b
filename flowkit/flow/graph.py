"""The loaded flow as a DAG: compiled nodes, their dependencies and the order they run in.

The loader builds these objects complete and nothing changes them afterwards: they are frozen
values, so any number of runs (threads, tasks, processes) may share one loaded flow. What a run
decides about a node (its endpoint, model, final cache key, whether it awaits) lives in the
run's own binding, ``flowkit.engine.bound``. networkx supplies the graph
algorithms (topological order, cycle finding) so none of that is hand-written here. It is
imported when a flow is loaded, not with the package: its import alone costs 0.2-0.3 s, which
commands that never load a flow (``--help``, ``show``, ``runs``) should not pay.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from flowkit.flow.refs import Ref
from flowkit.flow.spec import FlowSpec, InputSpec

if TYPE_CHECKING:
    import networkx as nx


EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Node:
    """A node ready to run: references parsed, code imported, prompt compiled. Frozen: a run
    reads it and binds what it decides in its own ``BoundNode`` (flowkit.engine.bound)."""

    name: str
    kind: str
    spec: Any
    file: str
    line: int
    inputs: tuple[tuple[str, Ref | None, Any], ...]
    """(parameter, reference or None, literal value when not a reference)."""
    when: tuple[tuple[Ref, bool, Any], ...] | None = None
    """Conditions that must all hold: (reference, whether `equals` was given, the value(s))."""
    impl: Any = None
    """What the node kind compiled: a callable, a prompt template, a sub-flow. Never changed
    by a run."""
    key_parts: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    """Everything known at load, but the inputs, that changes this node's result (code,
    prompt, sub-flow, declared environment variables), for the cache key."""
    static_key: str = ""
    """The load-time part of the cache key (spec and ``key_parts``); a run that adds run-time
    parts (the model) keys the node by its ``BoundNode.static_key`` instead."""
    deps: frozenset[str] = frozenset()
    is_async: bool = False
    """Whether running it awaits I/O, as compiled (``async def``, a model call, a function
    declared ``blocking``); such nodes become tasks so others proceed meanwhile."""

    @property
    def is_aggregate(self) -> bool:
        return self.kind == "aggregate"

    def refs(self) -> list[Ref]:
        found = [ref for _, ref, _ in self.inputs if ref is not None]
        found.extend(cond[0] for cond in self.when or ())
        return found


@dataclass(frozen=True, slots=True, repr=False, eq=False)
class Flow:
    """A validated flow: spec, compiled nodes and execution order. Frozen (see the module
    docstring); compared by identity, as a loaded flow is one value."""

    spec: FlowSpec
    path: Path
    nodes: Mapping[str, Node]
    outputs: Mapping[str, Ref]
    row_order: tuple[str, ...]
    """Per-row nodes in a topological order (ties broken by file order)."""
    aggregate_order: tuple[str, ...]
    content_hash: str
    graph: nx.DiGraph
    """Edges run from a node to the nodes that consume its output."""
    sources: tuple[str, ...] = ()
    """The flow files this was loaded from, so a worker process can load it again."""
    import_path: tuple[str, ...] = ()
    """Folders its python code imports from, on sys.path only while it loads or runs
    (flowkit.code.importpath)."""
    target: Any = None
    """How ``--target`` wrapped the flow in sources (flowkit.flow.target.Target), so a worker
    process can wrap it again; None for a flow run as it is."""
    code_files: tuple[tuple[str, str], ...] = ()
    """(file, sha256 of its text) for each file whose text entered a code fingerprint, so a run
    of a flow loaded before an edit loads it again (flowkit.code.freshness)."""

    @property
    def composed(self) -> bool:
        """Whether several flow files were composed into this one (`flowkit run A B`)."""
        return len(self.sources) > 1

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def inputs(self) -> dict[str, InputSpec]:
        return self.spec.inputs

    def __repr__(self) -> str:
        # The dataclass repr would print every node's spec, prompts included: kilobytes.
        inputs = ", ".join(n if s.required else f"{n}?" for n, s in self.inputs.items())
        return (
            f"<Flow {self.name!r} from {self.path}: inputs ({inputs}) → outputs "
            f"({', '.join(self.outputs)}); {len(self.nodes)} nodes ({', '.join(self.nodes)})>"
        )

    def _repr_html_(self) -> str:
        cell = html.escape
        rows = "".join(
            f"<tr><td>input</td><td>{cell(n)}</td><td>{cell(s.type)}"
            f"{'' if s.required else cell(f' = {s.default!r}')}</td></tr>"
            for n, s in self.inputs.items()
        )
        rows += "".join(
            f"<tr><td>node</td><td>{cell(n)}</td><td>{cell(node.kind)}</td></tr>"
            for n, node in self.nodes.items()
        )
        rows += "".join(
            f"<tr><td>output</td><td>{cell(n)}</td><td>{cell(ref.text)}</td></tr>"
            for n, ref in self.outputs.items()
        )
        return (
            f"<div><b>{cell(self.name)}</b> <code>{cell(str(self.path))}</code>"
            f"<table><tbody>{rows}</tbody></table></div>"
        )


def when_clause(when: Any, ref_of: Any) -> tuple[tuple[Ref, bool, Any], ...] | None:
    if when is None:
        return None
    out = []
    for cond in when if isinstance(when, list) else [when]:
        if isinstance(cond, str):
            out.append((ref_of(cond), False, None))
        else:
            out.append((ref_of(cond.ref), "equals" in cond.model_fields_set, cond.equals))
    return tuple(out)


def build_graph(nodes: Mapping[str, Node]) -> nx.DiGraph:
    """The dependency graph, frozen (``nx.freeze``): a flow shared by runs is never edited."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(
        (dep, name) for name, node in nodes.items() for dep in node.deps if dep in nodes
    )
    return nx.freeze(graph)


def find_cycle(graph: nx.DiGraph) -> list[str] | None:
    """One cycle as a closed path in the direction data flows (a → b → a), or None."""
    import networkx as nx

    try:
        edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return None
    return [edges[0][0]] + [v for _, v in edges]


def ordered(graph: nx.DiGraph, names: list[str], position: dict[str, int]) -> list[str]:
    """A topological order of ``names`` that keeps the file's order where the graph allows."""
    import networkx as nx

    sub = graph.subgraph(names)
    return list(nx.lexicographical_topological_sort(sub, key=lambda n: position[n]))
