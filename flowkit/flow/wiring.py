"""Wiring checks: every reference in a flow points at something that exists and may be read.

Inputs must be declared, nodes must exist (with a 'did you mean' when misspelt), a sub-flow must
have the output asked of it, a node whose function declares its dict's keys must have the key
asked of it, and only aggregate nodes may read an aggregate node's result. Two aggregate nodes
of one flow must not write the same metric key: one would silently overwrite the other.

The keys a function returns are declared with ``flowkit.metrics.keys.returns_keys`` and read
through ``flowkit.flow.declared``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowkit.errors import MOST_LISTED, did_you_mean, one_of
from flowkit.flow.declared import node_keys
from flowkit.flow.refs import Ref, RefSyntaxError, parse_flow_ref
from flowkit.flow.source import YDict, line_of
from flowkit.flow.spec import LATENCY_OUTPUT, USAGE_OUTPUT, FlowSpec

if TYPE_CHECKING:
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext


def check_outputs(
    ctx: LoadContext, spec: FlowSpec, raw: YDict, nodes: dict[str, Node], file: str
) -> dict[str, Ref]:
    """The flow's outputs as references, each checked; the bad ones reported and left out."""
    outputs: dict[str, Ref] = {}
    raw_out = raw.get("outputs") or {}
    for name, value in spec.outputs.items():
        line = line_of(raw_out, name) or raw.line_of("outputs")
        try:
            ref = parse_flow_ref(value)
        except RefSyntaxError as err:
            ctx.report(file, line, None, f"output {name!r}: {err}")
            continue
        if ref is None:
            ctx.report(
                file,
                line,
                None,
                f"output {name!r} must be a reference such as ${{node.output}} or ${{inputs.name}}",
            )
            continue
        problem = _target_problem(ctx, ref, spec, nodes)
        if problem is None and ref.name in nodes and nodes[ref.name].is_aggregate:
            problem = (
                f"reads aggregate node {ref.name!r}; outputs are per row, and "
                "aggregate results go to metrics.json"
            )
        if problem:
            ctx.report(file, line, None, f"output {name!r} {problem}")
        else:
            outputs[name] = ref
    return outputs


def check_refs(ctx: LoadContext, spec: FlowSpec, nodes: dict[str, Node]) -> None:
    """Report every node input and `when` that refers to nothing, or to what it may not read."""
    for node in nodes.values():
        for param, ref, _ in node.inputs:
            if ref is not None:
                _check_one(ctx, node, ref, spec, nodes, "inputs", param)
        for cond in node.when or ():
            _check_one(ctx, node, cond[0], spec, nodes, "when", None)


def _check_one(
    ctx: LoadContext,
    node: Node,
    ref: Ref,
    spec: FlowSpec,
    nodes: dict[str, Node],
    key: str,
    sub: Any,
) -> None:
    problem = _target_problem(ctx, ref, spec, nodes)
    if problem is None and ref.source == "node" and ref.name in nodes:
        if ref.name == node.name:
            problem = "reads its own output"
        elif nodes[ref.name].is_aggregate and not node.is_aggregate:
            problem = (
                f"reads aggregate node {ref.name!r}, which runs once after all rows; "
                "only aggregate nodes may read it"
            )
    if problem:
        ctx.error(node, f"{ref.text} {problem}", key=key, sub=sub)


def _target_problem(
    ctx: LoadContext, ref: Ref, spec: FlowSpec, nodes: dict[str, Node]
) -> str | None:
    if ref.source == "inputs":
        if ref.name not in spec.inputs:
            return (
                f"refers to unknown input {ref.name!r}{did_you_mean(ref.name, spec.inputs)}"
                f"; the flow's inputs are: {one_of(spec.inputs)}"
            )
        return None
    if ref.name not in nodes:
        if ref.name in ctx.broken:
            return None
        if ref.name in ("data", "run"):
            return (
                "reads data directly; declare a flow input and map the column to it "
                "(the default mapping is input x ← ${data.x})"
            )
        return (
            f"refers to unknown node {ref.name!r}"
            f"{did_you_mean(ref.name, [*nodes, *ctx.broken, 'inputs'])}"
        )
    target = nodes[ref.name]
    keys = node_keys(target) if ref.path and isinstance(ref.path[0], str) else None
    if keys is not None and ref.path[0] not in keys:
        return (
            f"refers to unknown key {ref.path[0]!r} of node {ref.name!r}"
            f"{did_you_mean(str(ref.path[0]), keys)}; it returns: {one_of(keys, MOST_LISTED)}"
        )
    if target.kind == "flow" and ref.path and target.impl is not None:
        outs = target.impl.spec.outputs
        if target.spec.latency:
            outs = {**outs, LATENCY_OUTPUT: None}
        if target.spec.usage:
            outs = {**outs, USAGE_OUTPUT: None}
        if isinstance(ref.path[0], str) and ref.path[0] not in outs:
            return (
                f"refers to unknown output {ref.path[0]!r} of sub-flow "
                f"{target.impl.name!r}{did_you_mean(ref.path[0], outs)}; it has: {one_of(outs)}"
            )
    return None


def check_metric_keys(ctx: LoadContext, nodes: dict[str, Node], flow_name: str = "") -> None:
    """Report an aggregate node that declares a metric key an earlier one of the same flow
    declares: both would be reported under one name, and the later would win unseen. Keys of
    aggregates that declare none are checked when the run writes them (engine.aggregation)."""
    _check_tree_metrics(ctx, nodes, flow_name)
    owners: dict[str, Node] = {}
    for node in nodes.values():
        keys = node_keys(node) if node.is_aggregate else None
        if keys is None:
            continue
        clash: dict[str, list[str]] = {}
        for key in sorted(keys):
            first = owners.setdefault(key, node)
            if first is not node:
                clash.setdefault(first.name, []).append(key)
        for other, shared in clash.items():
            ctx.error(
                node,
                f"metric {_keys_phrase(shared)} also written by aggregate node {other!r} "
                f"(line {nodes[other].line}): one would overwrite the other. " + COLLISION_FIX,
                key="function",
            )


def _tree_aggregates(nodes: Any, path: tuple[str, ...]) -> Any:
    """(metric prefix path, aggregate node) of every sub-flow below ``nodes``, as a run names
    their metrics (engine.plan: the sub-flow nodes' names, joined)."""
    for node in nodes.values():
        if node.kind == "flow" and node.impl is not None:
            sub = (*path, node.name)
            for inner in node.impl.nodes.values():
                if inner.is_aggregate:
                    yield sub, inner
            yield from _tree_aggregates(node.impl.nodes, sub)


def _check_tree_metrics(ctx: LoadContext, nodes: dict[str, Node], flow_name: str) -> None:
    """Report a metric name that one of this flow's aggregates and an aggregate of one of its
    sub-flows both declare (a flow named like its sub-flow node): the run would fail the later."""
    owners: dict[str, str] = {}
    for node in nodes.values():
        if node.is_aggregate and (keys := node_keys(node)) is not None:
            for key in keys:
                owners.setdefault(f"{flow_name}.{key}", node.name)
    for node in nodes.values():
        if node.kind != "flow":
            continue
        for path, inner in _tree_aggregates({node.name: node}, ()):
            keys = node_keys(inner) or frozenset()
            taken = sorted(k for k in keys if f"{'.'.join(path)}.{k}" in owners)
            if taken:
                name = ".".join(path)
                ctx.error(
                    node,
                    f"metric {_keys_phrase([f'{name}.{k}' for k in taken])} written by "
                    f"aggregate node {owners[f'{name}.{taken[0]}']!r} of this flow and by "
                    f"aggregate node {inner.name!r} of sub-flow {name!r}: one would overwrite "
                    "the other. Rename the flow or this node, so the two prefixes differ",
                    key="name",
                )


COLLISION_FIX = (
    "Give one of them keys of its own: return them from a function of yours, declared "
    "with @returns_keys (flowkit.metrics.keys), or use flowkit.metrics.aggregate:sums, "
    "which names its keys after its inputs ({overlap: ...} writes overlap.mean)"
)
"""How to resolve two aggregates writing one metric key (also said at run time)."""


def _keys_phrase(keys: list[str]) -> str:
    quoted = ", ".join(repr(k) for k in keys)
    return f"key {quoted} is" if len(keys) == 1 else f"keys {quoted} are"
