"""CI gates: `--gate "groundedness.mean>=4"` fails the command (exit 1) when a metric misses."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from flowkit.errors import GateError, UsageError, did_you_mean

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
    return Gate(parts[0], parts[1], value)


def evaluate(gates: list[Gate], metrics: dict[str, Any]) -> list[str]:
    """The failures, each as a sentence; empty when every gate holds."""
    failures: list[str] = []
    for gate in gates:
        if gate.metric not in metrics:
            failures.append(
                f"gate {gate}: no metric {gate.metric!r}{did_you_mean(gate.metric, metrics)}"
            )
            continue
        value = metrics[gate.metric]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            failures.append(f"gate {gate}: {gate.metric} is {value!r}, not a number")
        elif not OPERATORS[gate.op](value, gate.value):
            failures.append(f"gate {gate}: failed, {gate.metric} = {value:g}")
    return failures


def check_gates(gates: list[Gate], metrics: dict[str, Any], console: Console) -> None:
    for gate in gates:
        if gate.metric in metrics and not evaluate([gate], metrics):
            console.print(f"gate {gate}: passed ({gate.metric} = {metrics[gate.metric]:g})")
    failures = evaluate(gates, metrics)
    if failures:
        raise GateError("\n".join(failures))
