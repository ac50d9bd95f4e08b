"""One row's values as the executor builds them, and the reads made from them.

A scope holds one flow's node values and statuses within one row; a sub-flow node gets a child
scope. Reading a reference from a scope is the per-node hot path of a run, so references are
parsed at load time and a read is a dict lookup plus a short path walk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowkit.engine.records import OK, SKIPPED, ErrorInfo
from flowkit.flow.refs import MissingValue, Ref, walk

if TYPE_CHECKING:
    from flowkit.engine.sink import RunSink


class Scope:
    """One flow's values within one row; sub-flow nodes get child scopes."""

    __slots__ = ("children", "errors", "inputs", "ran", "status", "usage", "values")

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.values: dict[str, Any] = {}
        self.status: dict[str, str] = {}
        self.errors: list[tuple[str, ErrorInfo]] = []
        self.children: dict[str, Scope] = {}
        self.ran = False
        """Whether a node of this scope (or of a sub-flow's) ran rather than came from the cache."""
        self.usage: dict[str, int] = {}
        """The tokens this scope's model calls took (its sub-flows' too), cached calls included:
        what answering the row cost, which a `usage: true` flow node reports."""

    def add_usage(self, usage: dict[str, Any]) -> None:
        for k, v in usage.items():
            if isinstance(v, int):
                self.usage[k] = self.usage.get(k, 0) + v

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


def run_notices(writer: RunSink) -> list[str]:
    """The run's notices list (run.json "notices"), made when the run has none yet: what the
    engine adds to it during the run is written when the run closes."""
    info = writer.info
    if not isinstance(info.get("notices"), list):
        info["notices"] = list(info.get("notices") or ())
    notices: list[str] = info["notices"]
    return notices


class MissingKeys:
    """Reads of a path that a node's output lacks (a key its dict does not have): each such
    read is null, and each node gets ONE warning in the run's notices, naming each path that
    failed, the keys its output does have, and the reads that came back null.

    The counts are kept in run.json (``"missing_keys"``) beside the warnings, so a resumed run
    adds to them instead of repeating the warning."""

    __slots__ = ("_counts", "_index", "_info", "_notices")

    def __init__(self, writer: RunSink) -> None:
        self._notices = run_notices(writer)
        self._info: dict[str, Any] | None = writer.info
        kept = self._info.get("missing_keys")
        # node → reference text → [what is wrong with it, reads that came back null]
        self._counts: dict[str, dict[str, list[Any]]] = kept if isinstance(kept, dict) else {}
        self._index: dict[str, int] = {}  # node → its warning's place in the notices
        for node in self._counts:  # a resume: the warnings the run has already
            line = self._render(node)
            if line in self._notices:
                self._index[node] = self._notices.index(line)

    def note(self, ref: Ref, base: Any, prefix: str = "") -> None:
        node = prefix + ref.name
        known = self._counts.get(node, {}).get(ref.text)
        self._count(node, ref.text, 1, known[0] if known else _missing(ref, base))

    def counts(self) -> dict[str, dict[str, list[Any]]]:
        """Per node and reference, what is wrong and how many reads came back null (a
        worker's, for the driver to :meth:`merge`)."""
        return self._counts

    def merge(self, counts: dict[str, dict[str, list[Any]]]) -> None:
        """Add what a scale-out worker counted: still one warning per node for the run."""
        for node, refs in counts.items():
            for text, (what, reads) in refs.items():
                self._count(node, text, reads, what)

    def _count(self, node: str, text: str, reads: int, what: str) -> None:
        if not self._counts and self._info is not None:
            self._info["missing_keys"] = self._counts
        entry = self._counts.setdefault(node, {}).setdefault(text, [what, 0])
        entry[1] += reads
        if node not in self._index:
            self._index[node] = len(self._notices)
            self._notices.append("")
        self._notices[self._index[node]] = self._render(node)

    def _render(self, node: str) -> str:
        parts = [
            f"{what}; null in {reads} read{'s' if reads != 1 else ''}"
            for what, reads in self._counts[node].values()
        ]
        return f"warning: node {node!r} " + "; ".join(parts)


def _missing(ref: Ref, base: Any) -> str:
    """The warning's text but for its count: where the path stops, and why."""
    value, step = base, ref.path[0] if ref.path else None
    for step in ref.path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            break
    if isinstance(value, dict):
        keys = ", ".join(sorted(map(str, value))) or "none"
        return f"returned no key {step!r} for {ref.text} (its keys are: {keys})"
    kind = type(value).__name__ if value is not None else "null"
    return f"returned {kind} where {ref.text} reads {step!r}"


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
