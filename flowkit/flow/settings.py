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
    mapping = dict(mapping or {})
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
    if not wiring:
        return flow, mapping
    return _rebuilt(flow, wiring), mapping


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
