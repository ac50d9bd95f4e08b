"""CI gates: `--gate "groundedness.mean>=4"` fails the command (exit 1) when a metric misses."""

from __future__ import annotations

import ast
import inspect
import math
import operator
import re
import textwrap
from collections.abc import Callable, Iterable, Iterator
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
    return Gate(reported_name(parts[0]), parts[1], value)


def reported_name(metric: str) -> str:
    """The name a gate's metric is reported under (--gate's and --gate-drop's alike)."""
    # A Databricks per-row assessment name gates its run-level metric (`…/rating` reads
    # `…/rating/percentage`), so either spelling a Databricks user knows works.
    # Likewise a flow's other name (`ada_similarity.mean`) gates the metric the flow reports.
    from flowkit.flow.builtin import ALIASES
    from flowkit.metrics.aggregate import FORMER_AGENT_NAMES
    from flowkit.metrics.judges import ROW_NAMES

    prefix, dot, key = metric.partition(".")
    metric = f"{ALIASES[prefix]}.{key}" if dot and prefix in ALIASES else metric
    metric = FORMER_AGENT_NAMES.get(metric, metric)
    return ROW_NAMES.get(metric, metric)


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
    """The keys an aggregate node returns: as its function declares them (see
    flowkit.metrics.keys), else as its source spells them; None when they are known only
    once it has run."""
    from flowkit.flow.declared import KEYS_ATTRIBUTE
    from flowkit.metrics.keys import PER_ROW, declared_keys

    if node.spec.metrics == "logged":
        return None
    inputs = {param: PER_ROW if ref is not None else value for param, ref, value in node.inputs}
    fn = getattr(node.impl, "fn", None)
    if fn is None or hasattr(fn, KEYS_ATTRIBUTE):  # declared, if only as "known after the run"
        return declared_keys(fn, inputs)
    # Not by calling it on no rows: keys may come from the rows (a class's name), and the
    # answer for none would refuse a gate on them.
    return _keys_in_source(fn)


def _keys_in_source(fn: Any) -> frozenset[str] | None:
    """The keys when every ``return`` of the function is a dict literal with fixed string keys
    (``return {"mean": statistics.mean(xs)}``), the way most aggregates are written."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    body = tree.body[0] if tree.body else None
    if not isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    keys: set[str] = set()
    returns = 0
    for node in _own_nodes(body):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return None
        if not isinstance(node, ast.Return):
            continue
        returns += 1
        value = node.value
        if not isinstance(value, ast.Dict):
            return None
        for key in value.keys:
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return None  # a computed key, or **other
            keys.add(key.value)
    return frozenset(keys) if returns and keys else None


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or classes defined in it."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def check_gate_names(gates: list[Gate], flow: Any, option: str = "--gate") -> list[str]:
    """A gate on a metric the flow cannot produce would fail only after the whole (maybe paid)
    run: refuse it before the first row. The metrics' prefixes are known now, and so are the
    keys of aggregate functions that declare or spell them; the warnings returned
    name the gates whose keys are known only after the run."""
    if not gates:
        return []
    from flowkit.labels.read import GATED  # the labels' reader: only for a run with gates

    known = [(prefix, metric_keys(node), node) for prefix, node in aggregate_nodes(flow)]
    prefixes = list(dict.fromkeys(prefix for prefix, _, _ in known))
    unchecked: list[str] = []
    for gate in gates:
        if gate.metric.endswith(GATED):  # added by --labels: the metric it corrects must exist
            gate = Gate(gate.metric.rpartition(".")[0], gate.op, gate.value)
        owners = [(p, keys) for p, keys, _ in known if gate.metric.startswith(f"{p}.")]
        if owners:
            full = {f"{p}.{k}" for p, keys in owners for k in keys or ()}
            if gate.metric in full:  # an aggregate reports it, whatever the undeclared ones do
                continue
            if any(keys is None for _, keys in owners):
                unknown = [
                    n.name for p, k, n in known if k is None and gate.metric.startswith(f"{p}.")
                ]
                unchecked.append(
                    f"warning: {option} {_shown(gate, option)} is checked only after the run: "
                    f"aggregate {unknown[0]!r} does not say its keys before it runs (declare "
                    "them with @returns_keys, as `flowkit init` shows)"
                )
                continue
            # Another tool's name is reported bare (flowkit.engine.aggregation); the prefixed
            # spelling is still accepted.
            names = {k if "/" in k else f"{p}.{k}" for p, keys in owners for k in keys or ()}
            _refuse(gate, flow, names, "it reports " + one_of(names), option)
            continue
        if "/" in gate.metric or any(n.spec.metrics == "logged" for _, _, n in known):
            # Another tool's name (Databricks'), or a logged metric's bare name: reported
            # unprefixed by whichever aggregate computes it, so known now only if every
            # aggregate declares its keys.
            if any(keys is None for _, keys, _ in known):
                continue
            bare = {k for _, keys, _ in known for k in keys or () if "/" in k}
            if gate.metric not in bare:
                _refuse(gate, flow, bare, "its unprefixed names are " + one_of(bare), option)
            continue
        if not prefixes:
            raise UsageError(
                f"{option} {_shown(gate, option)}: flow {flow.name!r} computes no metrics "
                "(it has no aggregate node)"
            )
        key = gate.metric.partition(".")[2] or gate.metric
        guesses = [f"{p}.{key}" for p in prefixes]
        starts = ", ".join(f"'{p}.'" for p in prefixes)
        _refuse(gate, flow, guesses, "its metrics start with " + starts, option)
    return unchecked


def _shown(gate: Gate, option: str) -> str:
    return str(gate) if option == "--gate" else gate.metric


def _refuse(gate: Gate, flow: Any, near: Iterable[str], known: str, option: str) -> None:
    raise UsageError(
        f"{option} {_shown(gate, option)}: flow {flow.name!r} cannot produce metric {gate.metric!r}"
        f"{did_you_mean(gate.metric, near)}; {known}",
        hint="nothing was run",
    )


def evaluate(gates: list[Gate], metrics: dict[str, Any]) -> list[str]:
    """The failures, each as a sentence; empty when every gate holds."""
    return [message for gate in gates for passed, message in [outcome(gate, metrics)] if not passed]


def outcome(gate: Gate, metrics: dict[str, Any]) -> tuple[bool, str]:
    """Whether the gate holds and the sentence that says so. A metric that is absent, or
    present without a value (no row measured it), is a failed check, never a crash."""
    name = _reported_as(gate, metrics)
    if name is None:
        return False, f"gate {gate}: no metric {gate.metric!r}{did_you_mean(gate.metric, metrics)}"
    value = metrics[name]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False, f"gate {gate}: {gate.metric} has no value (no row measured it)"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False, f"gate {gate}: {gate.metric} is {value!r}, not a number"
    if not OPERATORS[gate.op](value, gate.value):
        return False, f"gate {gate}: failed, {gate.metric} = {value:g}"
    return True, f"gate {gate}: passed ({gate.metric} = {value:g})"


def _reported_as(gate: Gate, metrics: dict[str, Any]) -> str | None:
    """The metric name the gate reads: its own, or for a prefixed spelling of another tool's
    name (``agent.agent/latency_seconds/average``) the name it is reported under."""
    if gate.metric in metrics:
        return gate.metric
    bare = gate.metric.partition(".")[2]
    return bare if "/" in bare and bare in metrics else None


def check_gates(gates: list[Gate], metrics: dict[str, Any], console: Console) -> None:
    for gate in gates:
        passed, message = outcome(gate, metrics)
        if passed:
            console.print(message)
    failures = evaluate(gates, metrics)
    if failures:
        raise GateError("\n".join(failures))


@dataclass(frozen=True)
class Outcome:
    """One check that decides a CI job's exit code: a gate, the failed rows, an export."""

    name: str
    passed: bool
    message: str
    shown: bool = True
    """Printed at the end of a run (a check that found nothing to say is only recorded)."""
