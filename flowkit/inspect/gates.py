"""CI gates: `--gate "groundedness.mean>=4"` fails the command (exit 1) when a metric misses."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from flowkit.errors import GateError, UsageError, did_you_mean, one_of

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*(?P<name>[^<>=!\s]+)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>.*?)\s*$")


def split_condition(text: str) -> tuple[str, str, str] | None:
    """``name<op>value`` as its three parts (value still text), or None; shared by --gate and
    `flowkit trace --where` so both read conditions the same way."""
    m = _CONDITION.match(text)
    if not m or not m["value"]:
        return None
    return m["name"], m["op"], m["value"]


@dataclass(frozen=True)
class Gate:
    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"


def parse_gate(text: str) -> Gate:
    parts = split_condition(text)
    try:
        value = float(parts[2]) if parts else None
    except ValueError:
        value = None
    if value is not None and not math.isfinite(value):
        value = None  # every comparison with NaN is false: a gate that can never say anything
    if parts is None or value is None:
        raise UsageError(
            f"--gate {text!r} must read METRIC<OP>NUMBER, e.g. 'groundedness.mean>=4'",
            hint=f"operators: {', '.join(OPERATORS)}",
        )
    # A Databricks per-row assessment name gates its run-level metric (`…/rating` reads
    # `…/rating/percentage`), so either spelling a Databricks user knows works.
    # Likewise a flow's other name (`ada_similarity.mean`) gates the metric the flow reports.
    from flowkit.flow.builtin import ALIASES
    from flowkit.metrics.judges import ROW_NAMES

    prefix, dot, key = parts[0].partition(".")
    metric = f"{ALIASES[prefix]}.{key}" if dot and prefix in ALIASES else parts[0]
    return Gate(ROW_NAMES.get(metric, metric), parts[1], value)


def aggregate_nodes(flow: Any, path: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    """(metric prefix, node) of every aggregate in the flow tree, named as the engine names
    their metrics: the flow's name for its own, the sub-flow node's path for a sub-flow's."""
    found = [(".".join(path) if path else flow.name, flow.nodes[n]) for n in flow.aggregate_order]
    for name in flow.row_order:
        node = flow.nodes[name]
        if node.kind == "flow":
            found += aggregate_nodes(node.impl, (*path, name))
    return found


def metric_keys(node: Any) -> frozenset[str] | None:
    """The keys an aggregate node returns, when its function declares them (see
    flowkit.metrics.keys); None when they are known only once it has run."""
    from flowkit.metrics.keys import PER_ROW, declared_keys

    if node.spec.metrics == "logged":
        return None
    inputs = {param: PER_ROW if ref is not None else value for param, ref, value in node.inputs}
    return declared_keys(getattr(node.impl, "fn", None), inputs)


def check_gate_names(gates: list[Gate], flow: Any) -> None:
    """A gate on a metric the flow cannot produce would fail only after the whole (maybe paid)
    run: refuse it before the first row. The metrics' prefixes are known now, and so are the
    keys of aggregate functions that declare them; other keys are checked after the run."""
    known = [(prefix, metric_keys(node), node) for prefix, node in aggregate_nodes(flow)]
    prefixes = list(dict.fromkeys(prefix for prefix, _, _ in known))
    for gate in gates:
        owners = [(p, keys) for p, keys, _ in known if gate.metric.startswith(f"{p}.")]
        if owners:
            if any(keys is None for _, keys in owners):
                continue
            full = {f"{p}.{k}" for p, keys in owners for k in keys or ()}
            # Another tool's name is reported bare (flowkit.engine.aggregation); the prefixed
            # spelling is still accepted.
            names = {k if "/" in k else f"{p}.{k}" for p, keys in owners for k in keys or ()}
            if gate.metric not in full:
                _refuse(gate, flow, names, "it reports " + one_of(names))
            continue
        if "/" in gate.metric or any(n.spec.metrics == "logged" for _, _, n in known):
            # Another tool's name (Databricks'), or a logged metric's bare name: reported
            # unprefixed by whichever aggregate computes it, so known now only if every
            # aggregate declares its keys.
            if any(keys is None for _, keys, _ in known):
                continue
            bare = {k for _, keys, _ in known for k in keys or () if "/" in k}
            if gate.metric not in bare:
                _refuse(gate, flow, bare, "its unprefixed names are " + one_of(bare))
            continue
        if not prefixes:
            raise UsageError(
                f"--gate {gate}: flow {flow.name!r} computes no metrics (it has no aggregate node)"
            )
        key = gate.metric.partition(".")[2] or gate.metric
        guesses = [f"{p}.{key}" for p in prefixes]
        _refuse(
            gate, flow, guesses, "its metrics start with " + ", ".join(f"'{p}.'" for p in prefixes)
        )


def _refuse(gate: Gate, flow: Any, near: Iterable[str], known: str) -> None:
    raise UsageError(
        f"--gate {gate}: flow {flow.name!r} cannot produce metric {gate.metric!r}"
        f"{did_you_mean(gate.metric, near)}; {known}",
        hint="nothing was run",
    )


def evaluate(gates: list[Gate], metrics: dict[str, Any]) -> list[str]:
    """The failures, each as a sentence; empty when every gate holds."""
    failures: list[str] = []
    for gate in gates:
        name = _reported_as(gate, metrics)
        if name is None:
            failures.append(
                f"gate {gate}: no metric {gate.metric!r}{did_you_mean(gate.metric, metrics)}"
            )
            continue
        value = metrics[name]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            failures.append(f"gate {gate}: {gate.metric} is {value!r}, not a number")
        elif not OPERATORS[gate.op](value, gate.value):
            failures.append(f"gate {gate}: failed, {gate.metric} = {value:g}")
    return failures


def _reported_as(gate: Gate, metrics: dict[str, Any]) -> str | None:
    """The metric name the gate reads: its own, or for a prefixed spelling of another tool's
    name (``agent.agent/latency_seconds/average``) the name it is reported under."""
    if gate.metric in metrics:
        return gate.metric
    bare = gate.metric.partition(".")[2]
    return bare if "/" in bare and bare in metrics else None


def check_gates(gates: list[Gate], metrics: dict[str, Any], console: Console) -> None:
    for gate in gates:
        name = _reported_as(gate, metrics)
        if name is not None and not evaluate([gate], metrics):
            console.print(f"gate {gate}: passed ({gate.metric} = {metrics[name]:g})")
    failures = evaluate(gates, metrics)
    if failures:
        raise GateError("\n".join(failures))
