"""One row's values as the executor builds them, and the reads made from them.

A scope holds one flow's node values and statuses within one row; a sub-flow node gets a child
scope. Reading a reference from a scope is the per-node hot path of a run, so references are
parsed at load time and a read is a dict lookup plus a short path walk.
"""

from __future__ import annotations

from typing import Any

from flowkit.engine.records import OK, SKIPPED, ErrorInfo
from flowkit.flow.refs import MissingValue, Ref, walk


class Scope:
    """One flow's values within one row; sub-flow nodes get child scopes."""

    __slots__ = ("children", "errors", "inputs", "ran", "status", "values")

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.values: dict[str, Any] = {}
        self.status: dict[str, str] = {}
        self.errors: list[tuple[str, ErrorInfo]] = []
        self.children: dict[str, Scope] = {}
        self.ran = False
        """Whether a node of this scope (or of a sub-flow's) ran rather than came from the cache."""

    def get(self, ref: Ref) -> Any:
        if ref.source == "node" and self.status.get(ref.name) == SKIPPED:
            return None  # a skipped node's output is null, and so is every path into it
        base = self.inputs[ref.name] if ref.source == "inputs" else self.values[ref.name]
        return walk(base, ref.path, ref.text) if ref.path else base


def when_holds(when: tuple[tuple[Ref, bool, Any], ...], scope: Scope) -> bool:
    for ref, has_equals, expected in when:
        if ref.source == "node" and scope.status.get(ref.name) != OK:
            return False
        value = scope.get(ref)
        if not has_equals:
            if not value:
                return False
        elif not (value in expected if isinstance(expected, list) else value == expected):
            return False
    return True


def run_notices(writer: Any) -> list[str]:
    """The run's notices list (run.json "notices"), made when the run has none yet: what the
    engine adds to it during the run is written when the run closes."""
    info = getattr(writer, "info", None)
    if not isinstance(info, dict):
        return []
    if not isinstance(info.get("notices"), list):
        info["notices"] = list(info.get("notices") or ())
    notices: list[str] = info["notices"]
    return notices


class MissingKeys:
    """Reads of a path that a node's output lacks (a key its dict does not have): each such
    read is null, and each node gets ONE warning in the run's notices, naming the keys its
    output does have and counting the reads that came back null."""

    __slots__ = ("_notices", "_seen")

    def __init__(self, notices: list[str]) -> None:
        self._notices = notices
        self._seen: dict[str, list[Any]] = {}  # node → [index in notices, rows, message]

    def note(self, ref: Ref, base: Any, prefix: str = "") -> None:
        node = prefix + ref.name
        seen = self._seen.get(node)
        self._count(node, 1, _missing(node, ref, base) if seen is None else seen[2])

    def counts(self) -> dict[str, tuple[str, int]]:
        """Per node, its warning and how many reads came back null (a worker's, for the
        driver to :meth:`merge`)."""
        return {node: (seen[2], seen[1]) for node, seen in self._seen.items()}

    def merge(self, counts: dict[str, tuple[str, int]]) -> None:
        """Add what a scale-out worker counted: still one warning per node for the run."""
        for node, (message, reads) in counts.items():
            self._count(node, reads, message)

    def _count(self, node: str, reads: int, message: str) -> None:
        seen = self._seen.get(node)
        if seen is None:
            seen = self._seen[node] = [len(self._notices), 0, message]
            self._notices.append("")
        seen[1] += reads
        self._notices[seen[0]] = f"{seen[2]}; null in {seen[1]} read{'s' if seen[1] != 1 else ''}"


def _missing(node: str, ref: Ref, base: Any) -> str:
    """The warning's text but for its count: where the path stops, and why."""
    value, step = base, ref.path[0] if ref.path else None
    for step in ref.path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            break
    if isinstance(value, dict):
        keys = ", ".join(sorted(map(str, value))) or "none"
        return (
            f"warning: node {node!r} returned no key {step!r} for {ref.text} (its keys are: {keys})"
        )
    kind = type(value).__name__ if value is not None else "null"
    return f"warning: node {node!r} returned {kind} where {ref.text} reads {step!r}"


def value_or_none(
    scope: Scope, ref: Ref, missing: MissingKeys | None = None, prefix: str = ""
) -> Any:
    if ref.source == "node" and scope.status.get(ref.name) != OK:
        return None
    try:
        return scope.get(ref)
    except MissingValue:
        if missing is not None and ref.source == "node":
            missing.note(ref, scope.values.get(ref.name), prefix)
        return None


def read_outputs(
    scope: Scope, refs: list[tuple[str, Ref]], missing: MissingKeys | None = None
) -> dict[str, Any]:
    """``{name: value_or_none(scope, ref)}``, unrolled: it runs once per row and per sub-flow."""
    status, values = scope.status, scope.values
    outputs: dict[str, Any] = {}
    for name, ref in refs:
        if ref.source == "node":
            if status.get(ref.name) != OK:
                outputs[name] = None
                continue
            base = values[ref.name]
        else:
            base = scope.inputs[ref.name]
        try:
            outputs[name] = walk(base, ref.path, ref.text) if ref.path else base
        except MissingValue:
            outputs[name] = None
            if missing is not None and ref.source == "node":
                missing.note(ref, base)
    return outputs


def has_invalid(outputs: dict[str, Any]) -> bool:
    """Whether a row's outputs (or a suite's per-metric outputs) hold result 'invalid'."""
    if outputs.get("result") == "invalid":
        return True
    for value in outputs.values():  # a loop, not any(): this runs once per row
        if isinstance(value, dict) and value.get("result") == "invalid":
            return True
    return False


def subflow_invalid(scope: Scope) -> bool:
    """Whether a sub-flow in this row (at any depth) produced result 'invalid'.

    A suite's outputs are usually bare scores, so its rows' invalid judges show only here."""
    for name, child in scope.children.items():
        value = scope.values.get(name)
        if scope.status.get(name) == OK and isinstance(value, dict) and has_invalid(value):
            return True
        if child.children and subflow_invalid(child):
            return True
    return False


def first_error(scope: Scope, prefix: str) -> tuple[str, ErrorInfo] | None:
    """The node that failed first in this scope, looking inside failed sub-flows for the cause."""
    for name, info in scope.errors:
        if info.type != "SubflowFailed":
            return prefix + name, info
        child = scope.children.get(name)
        inner = first_error(child, f"{prefix}{name}.") if child else None
        return inner or (prefix + name, info)
    return None
