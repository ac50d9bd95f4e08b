"""Per-flow settings: `--map groundedness.threshold=4` on a run of several flows or a suite.

A flow that runs others as sub-flow nodes (a suite, `flowkit run A B`, `--target`) exposes only
the inputs it wires; a sub-flow's own setting (its ``threshold``, ``domain``,
``invalid_as_fail``) would otherwise stay at its default. ``with_settings`` rebuilds the flow
with each such setting as an input of its own, wired to the sub-flow nodes it names:

- ``NODE.INPUT``: that sub-flow node's input (``NODE`` is the flow's name in `flowkit run A B`);
  a run's own flow name as ``NODE`` is the flow's input itself;
- ``INPUT`` that is no input of the run's flow: every sub-flow node whose flow takes it.

The rebuilt flow names the new input ``NODE__INPUT`` (or ``INPUT``) and the mapping is rewritten
to it. The run, its resume and its worker processes all rebuild from the recorded mapping, so
they run the same flow (the content hash checks it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.flow.graph import Flow
from flowkit.flow.source import YDict


def _targets(flow: Flow, key: str) -> list[tuple[str, str]]:
    """The (sub-flow node, its input) pairs ``key`` sets; empty when it sets none."""
    subs = {n.name: n.impl for n in flow.nodes.values() if n.kind == "flow"}
    node, dot, name = key.partition(".")
    if dot:
        sub = subs.get(node)
        return [(node, name)] if isinstance(sub, Flow) and name in sub.inputs else []
    if key in flow.inputs:
        return []
    return [(n, key) for n, sub in subs.items() if isinstance(sub, Flow) and key in sub.inputs]


def with_settings(flow: Flow, mapping: dict[str, str] | None) -> tuple[Flow, dict[str, str]]:
    """(``flow`` with a run input for each per-flow setting in ``mapping``, the mapping over
    the new flow's inputs); both unchanged when the mapping sets no sub-flow's input."""
    written = {_unaliased(k): k for k in mapping or {}}  # to name a key as the user wrote it
    mapping = {_unaliased(k): v for k, v in (mapping or {}).items()}
    own = {k: v for k, v in mapping.items() if k.startswith(f"{flow.name}.")}
    for key in own:  # `groundedness.threshold` on a run of groundedness alone
        bare = key.partition(".")[2]
        if bare in flow.inputs:
            mapping[bare] = mapping.pop(key)
    wiring: dict[str, list[tuple[str, str]]] = {}
    for key in list(mapping):
        targets = _targets(flow, key)
        if targets:
            name = key.replace(".", "__")
            wiring[name] = targets
            mapping[name] = mapping.pop(key)
    for key in mapping:
        if "." in key:  # an input's name has no dot: this names a flow the run lacks
            _refuse(flow, key, written.get(key, key))
    if not wiring:
        return flow, mapping
    return _rebuilt(flow, wiring), mapping


def _unaliased(key: str) -> str:
    """``ada_similarity.threshold`` as ``embedding_similarity.threshold``: a flow's other name
    sets the flow's inputs, as it gates its metrics."""
    from flowkit.flow.builtin import ALIASES

    node, dot, name = key.partition(".")
    return f"{ALIASES[node]}.{name}" if dot and node in ALIASES else key


def flows_of(flow: Flow) -> list[str]:
    """The flows of a run as the user named them: the flow itself (not the `suite` that
    `flowkit run A B` makes, nor the flow --target wraps it in) and its sub-flow nodes (not
    --target's app and agent_metrics)."""
    subs = [n.name for n in flow.nodes.values() if n.kind == "flow"]
    if flow.target is not None:
        from flowkit.flow.target import AGENT_NODE, TARGET_NODE

        subs = [s for s in subs if s not in (TARGET_NODE, AGENT_NODE)]
    own = [] if flow.composed or flow.target is not None else [flow.name]
    return own + [s for s in subs if s not in own]


def _refuse(flow: Flow, key: str, written: str) -> None:
    """A ``FLOW.INPUT`` setting that sets nothing (``key``, as ``written`` by the user): no such
    flow in the run, or no such input of the flow it names; said with the names there are,
    and the closest."""
    flows = flows_of(flow)
    node, _, name = key.partition(".")
    if node in flows:
        sub = flow if node == flow.name else flow.nodes[node].impl
        inputs = sub.inputs if isinstance(sub, Flow) else {}
        raise UsageError(
            f"--map {written}: flow {node!r} has no input {name!r}{did_you_mean(name, inputs)}",
            hint=f"its inputs are: {one_of(inputs)}",
        )
    node = written.partition(".")[0]
    raise UsageError(
        f"--map {written}: no flow {node!r} in this run{did_you_mean(node, flows)}",
        hint=f"the run's flows are: {one_of(flows)}; --map FLOW.INPUT=VALUE sets one of them",
    )


def _rebuilt(flow: Flow, wiring: dict[str, list[tuple[str, str]]]) -> Flow:
    from flowkit.flow.loader import LoadContext, _raise

    raw = flow.spec.model_dump(exclude_unset=True, by_alias=True)
    nodes: list[dict[str, Any]] = raw["nodes"]
    inputs = dict(raw.get("inputs", {}))
    by_name = {n["name"]: n for n in nodes}
    for name, targets in wiring.items():
        node, param = targets[0]
        sub = flow.nodes[node].impl
        inputs[name] = sub.inputs[param].model_dump(exclude_unset=True)
        for node, param in targets:
            by_name[node]["inputs"] = {
                **by_name[node].get("inputs", {}),
                param: f"${{inputs.{name}}}",
            }
    raw["inputs"] = inputs
    ydict = YDict(raw)
    ydict.file, ydict.line, ydict.key_lines = str(flow.path), 0, {}
    ctx = LoadContext()
    rebuilt = ctx.build(ydict, flow.path, flow.name)
    _raise(ctx, flow.name)
    assert rebuilt is not None
    return replace(rebuilt, sources=flow.sources, target=flow.target, code_files=flow.code_files)
