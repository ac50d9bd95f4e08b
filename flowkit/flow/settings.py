"""Per-flow settings: `--map groundedness.threshold=4` on a run of several flows or a suite.

A flow that runs others as sub-flow nodes (a suite, `flowkit run A B`, `--target`) exposes only
the inputs it wires; a sub-flow's own setting (its ``threshold``, ``domain``,
``invalid_as_fail``) would otherwise stay at its default. ``with_settings`` rebuilds the flow
with each such setting as an input of its own, wired to the sub-flow nodes it names:

- ``NODE.INPUT``: that sub-flow node's input (``NODE`` is the flow's name in `flowkit run A B`);
  a run's own flow name as ``NODE`` is the flow's input itself;
- ``INPUT`` that is no input of the run's flow: every sub-flow node whose flow takes it.

The node is found however deep it sits (a suite inside --target's wrapper, a suite of suites):
each sub-flow on the way down is rebuilt with the setting as an input of its own, passed on to
the next. The rebuilt flow names the new input ``NODE__INPUT`` (or ``INPUT``) and the mapping is
rewritten to it. The run, its resume and its worker processes all rebuild from the recorded
mapping, so they run the same flow (the content hash checks it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.flow.graph import Flow
from flowkit.flow.source import YDict

Path_ = tuple[str, ...]
"""Sub-flow node names from the run's flow down to the one whose input a setting sets."""


def _subs(flow: Flow) -> dict[str, Flow]:
    """The flow's sub-flow nodes, by node name; not --target's app, whose inputs are the run's."""
    from flowkit.flow.target import TARGET_NODE

    return {
        n.name: n.impl
        for n in flow.nodes.values()
        if n.kind == "flow"
        and isinstance(n.impl, Flow)
        and not (flow.target is not None and n.name == TARGET_NODE)
    }


def _targets(flow: Flow, key: str) -> list[tuple[Path_, str]]:
    """The (path to a sub-flow node, its input) pairs ``key`` sets, however deep the node sits
    (a suite inside --target's wrapper, a suite of suites); empty when it sets none."""
    node, dot, name = key.partition(".")
    if not dot and key in flow.inputs:
        return []
    found: list[tuple[Path_, str]] = []
    for sub_name, sub in _subs(flow).items():
        if (sub_name == node and name in sub.inputs) if dot else key in sub.inputs:
            found.append(((sub_name,), name if dot else key))
        else:  # a flow that does not take it may hold flows that do
            found += [((sub_name, *path), p) for path, p in _targets(sub, key)]
    return found


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
    wiring: dict[str, list[tuple[Path_, str]]] = {}
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
    `flowkit run A B` makes, nor the flow --target wraps it in) and its sub-flow nodes at every
    depth (not --target's app and agent_metrics)."""
    own = [] if flow.composed or flow.target is not None else [flow.name]
    return list(dict.fromkeys([*own, *_nested(flow)]))


def _nested(flow: Flow) -> list[str]:
    from flowkit.flow.target import AGENT_NODE

    names: list[str] = []
    for name, sub in _subs(flow).items():
        if not (flow.target is not None and name == AGENT_NODE):
            names += [name, *_nested(sub)]
    return names


def _flow_named(flow: Flow, name: str) -> Flow | None:
    """The sub-flow of node ``name`` at any depth (the first found), or the flow itself."""
    if name == flow.name:
        return flow
    for sub_name, sub in _subs(flow).items():
        found = sub if sub_name == name else _flow_named(sub, name)
        if found is not None:
            return found
    return None


def _refuse(flow: Flow, key: str, written: str) -> None:
    """A ``FLOW.INPUT`` setting that sets nothing (``key``, as ``written`` by the user): no such
    flow in the run, or no such input of the flow it names; said with the names there are,
    and the closest."""
    flows = flows_of(flow)
    node, _, name = key.partition(".")
    if node in flows:
        sub = _flow_named(flow, node)
        inputs = sub.inputs if sub is not None else {}
        raise UsageError(
            f"--map {written}: flow {node!r} has no input {name!r}{did_you_mean(name, inputs)}",
            hint=f"its inputs are: {one_of(inputs)}",
        )
    node = written.partition(".")[0]
    raise UsageError(
        f"--map {written}: no flow {node!r} in this run{did_you_mean(node, flows)}",
        hint=f"the run's flows are: {one_of(flows)}; --map FLOW.INPUT=VALUE sets one of them",
    )


def _rebuilt(flow: Flow, wiring: dict[str, list[tuple[Path_, str]]]) -> Flow:
    """``flow`` with each input of ``wiring`` wired to the sub-flow inputs it names; a sub-flow
    that holds one deeper is rebuilt first with that input of its own, passed down to it."""
    from flowkit.flow.loader import LoadContext, _raise

    raw = flow.spec.model_dump(exclude_unset=True, by_alias=True)
    nodes: list[dict[str, Any]] = raw["nodes"]
    inputs = dict(raw.get("inputs", {}))
    by_name = {n["name"]: n for n in nodes}
    deeper: dict[str, dict[str, list[tuple[Path_, str]]]] = {}  # node → its sub-flow's wiring
    for name, targets in wiring.items():
        inputs[name] = _spec_of(flow, *targets[0])
        for path, param in targets:
            node = path[0]
            if len(path) > 1:
                deeper.setdefault(node, {}).setdefault(name, []).append((path[1:], param))
                param = name
            by_name[node]["inputs"] = {
                **by_name[node].get("inputs", {}),
                param: f"${{inputs.{name}}}",
            }
    raw["inputs"] = inputs
    ydict = YDict(raw)
    ydict.file, ydict.line, ydict.key_lines = str(flow.path), 0, {}
    ctx = LoadContext()
    for node, inner in deeper.items():
        sub = flow.nodes[node].impl
        assert isinstance(sub, Flow)
        # The node's file loads as the rebuilt sub-flow (the loader's cache holds it by path):
        # the same in the driver and every worker, so the content hash is one.
        ctx._loaded[sub.path.resolve()] = _rebuilt(sub, inner)
    rebuilt = ctx.build(ydict, flow.path, flow.name)
    _raise(ctx, flow.name)
    assert rebuilt is not None
    return replace(rebuilt, sources=flow.sources, target=flow.target, code_files=flow.code_files)


def _spec_of(flow: Flow, path: Path_, param: str) -> dict[str, Any]:
    """The spec of the input ``param`` of the sub-flow at the end of ``path``."""
    for node in path:
        sub = flow.nodes[node].impl
        assert isinstance(sub, Flow)
        flow = sub
    return flow.inputs[param].model_dump(exclude_unset=True)
