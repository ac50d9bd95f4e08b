"""The data mapping: how each flow input is filled from a data row or an earlier run.

By default flow input `x` ← `${data.x}`; `--map x=${data.nested.field}` or `x=${run.outputs.y}`
(or `${run.usage.total_tokens}`, `${run.usage.latency_seconds}`: the earlier run's own cost)
overrides it, and any other text is a literal. The mapping is checked against the data's columns
before any row runs, so a required input with nowhere to come from is one clear error up front.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flowkit.data.coerce import coerce
from flowkit.data.jsonl import read_outputs, read_usage
from flowkit.data.needs import REPLY_INPUTS, alias_for, alias_note, shapes_text, unmet
from flowkit.errors import (
    MOST_LISTED,
    Diagnostic,
    UsageError,
    ValidationError,
    did_you_mean,
    one_of,
)
from flowkit.flow.graph import Flow
from flowkit.flow.refs import MissingValue, Ref, RefSyntaxError, parse_data_ref, walk
from flowkit.flow.settings import flows_of
from flowkit.flow.source import line_of
from flowkit.metrics.adapters import is_messages, query_text, reply_text, request_text


class RowError(ValueError):
    """A data row that cannot fill the flow's inputs; the row is reported, the run goes on."""


class Mapping:
    """Resolved input → source for one run."""

    def __init__(
        self, flow: Flow, overrides: dict[str, str] | None = None, prior_run: Path | None = None
    ) -> None:
        self.flow = flow
        overrides = dict(overrides or {})
        unknown = [k for k in overrides if k not in flow.inputs]
        if unknown:
            flows = flows_of(flow) if flow.composed or flow.target else [flow.name]
            whose = (
                f"flow {flows[0]!r}" if len(flows) == 1 else f"the run's flows ({', '.join(flows)})"
            )
            raise UsageError(
                f"--map names {', '.join(map(repr, unknown))}, not an input of "
                f"{whose}{did_you_mean(unknown[0], flow.inputs)}",
                hint=f"the flow's inputs are: {one_of(flow.inputs)}",
            )
        self.sources: dict[str, Ref | None] = {}
        self.literals: dict[str, Any] = {}
        for name in flow.inputs:
            text = overrides.get(name, f"${{data.{name}}}")
            try:
                ref = parse_data_ref(text)
            except RefSyntaxError as err:
                raise UsageError(f"--map {name}=…: {err}") from None
            if ref is None:
                self.literals[name] = text
            self.sources[name] = ref
        self.explicit = set(overrides)
        self.notices: list[str] = []
        self.prior: dict[int, dict[str, Any]] | None = None
        if any(r is not None and r.source == "run" for r in self.sources.values()):
            if prior_run is None:
                raise UsageError(
                    "the mapping reads ${run.…} but no earlier run was given",
                    hint="pass --run RUN_DIR",
                )
            self.prior = read_outputs(prior_run)
            if any(r is not None and r.name.startswith("usage.") for r in self.sources.values()):
                for line, usage in read_usage(prior_run).items():
                    if line in self.prior:
                        self.prior[line]["usage"] = usage
        self._types = {name: spec.type for name, spec in flow.inputs.items()}
        self._requests: set[str] = set()  # inputs read from a Databricks `request` column
        self._defaults = {n: s.default for n, s in flow.inputs.items() if not s.required}

    def as_dict(self) -> dict[str, str]:
        return {n: (r.text if r else repr(self.literals[n])) for n, r in self.sources.items()}

    def check(self, columns: list[str]) -> None:
        """Every required input must have a source among ``columns`` (or an earlier run)."""
        problems: list[Diagnostic] = []
        aliased = self._alias(columns)
        for name, ref in self.sources.items():
            if ref is None or ref.source != "data" or ref.name in columns:
                continue
            spec = self.flow.inputs[name]
            if not spec.required and name not in self.explicit:
                continue
            what = "is required but maps" if spec.required else "is mapped"
            _, candidates = alias_for(name, columns)
            both = " and ".join(map(repr, candidates))
            hint = f" ({both} could each be it: choose one)" if name not in self.explicit else ""
            problems.append(
                Diagnostic(
                    _display(self.flow),
                    line_of(_raw_inputs(self.flow), name),  # read only to report
                    None,
                    f"input {name!r} {what} to no data column ({ref.text}); the data has: "
                    f"{one_of(columns, MOST_LISTED)}{did_you_mean(ref.name, columns)}; map one "
                    f"with --map {name}=${{data.COLUMN}}{hint if len(candidates) > 1 else ''}",
                )
            )
        problems += self._unmet_shapes(columns)
        if problems:
            raise ValidationError(problems)
        self.notices = aliased + self._literal_columns(columns) + self._skipped_for_columns(columns)

    def _alias(self, columns: list[str]) -> list[str]:
        """Inputs whose own column the data lacks read the one column another tool names them
        by (flowkit.data.needs); the notes say which."""
        notes = []
        for name, ref in self.sources.items():
            if name in self.explicit or ref is None or ref.name in columns:
                continue
            column, candidates = alias_for(name, columns)
            if column is not None:
                self.sources[name] = parse_data_ref(f"${{data.{column}}}")
                if column == "request":
                    self._requests.add(name)
                notes.append(alias_note(name, column))
            elif len(candidates) > 1 and not self.flow.inputs[name].required:
                # A required one is refused in check(); an optional one would silently read
                # nothing.
                both = " and ".join(map(repr, candidates))
                notes.append(
                    f"warning: input {name!r} reads no column: {both} could each be it; "
                    f"choose one with --map {name}='${{data.COLUMN}}'"
                )
        return notes

    def _filled(self, columns: list[str]) -> Callable[[str], bool]:
        def has(name: str) -> bool:
            ref = self.sources.get(name)
            if ref is None:
                return self.literals.get(name) not in (None, "")
            return ref.source != "data" or ref.name in columns

        return has

    def _unmet_shapes(self, columns: list[str]) -> list[Diagnostic]:
        """A flow that needs one of several input sets, none of which the data fills, would
        fail every row: said once, with the columns the data has and the --map that fixes it."""
        problems = []
        has = self._filled(columns)
        for who, shapes in unmet(self.flow, has):
            fixes = ", or ".join(
                " ".join(f"--map {n}='${{data.{_guess(n, columns)}}}'" for n in shape if not has(n))
                for shape in shapes
            )
            own = who == self.flow.name and self.flow.spec.shapes
            problems.append(
                Diagnostic(
                    _display(self.flow),
                    line_of(_raw_inputs(self.flow, "shapes"), "shapes") if own else 0,
                    None,
                    f"flow {who!r} needs {shapes_text(shapes)}, and the data has no column for "
                    f"them; the data has: {one_of(columns)}; map them with {fixes}",
                )
            )
        return problems

    def _literal_columns(self, columns: list[str]) -> list[str]:
        """A literal that names a column was almost surely meant to read it."""
        return [
            f"warning: --map {name}={text} is the literal text {text!r} on every row, and the "
            f"data has a column {text!r}; to read the column write --map {name}='${{data.{text}}}'"
            for name, text in self.literals.items()
            if name in self.explicit and text in columns
        ]

    def _skipped_for_columns(self, columns: list[str]) -> list[str]:
        """Nodes whose `when` reads an input whose column the data lacks: they will skip on
        every row. Suites rely on this to compute only the metrics the data's fields allow."""
        notices = []
        for node in self.flow.nodes.values():
            for ref, _, _ in node.when or ():
                src = self.sources.get(ref.name) if ref.source == "inputs" else None
                if src is not None and src.source == "data" and src.name not in columns:
                    what = f"metric {node.name!r}" if node.kind == "flow" else f"node {node.name!r}"
                    notices.append(
                        f"{what} skipped: the data has no column {src.name!r} "
                        f"(columns: {one_of(columns, MOST_LISTED)})"
                    )
                    break
        return notices

    def apply(self, values: dict[str, Any], line: int) -> dict[str, Any]:
        """The flow inputs for one data row, converted to the declared types."""
        inputs: dict[str, Any] = {}
        for name, ref in self.sources.items():
            if ref is None:
                value = self.literals[name]
            else:
                try:
                    value = self._lookup(ref, values, line)
                except MissingValue as err:
                    if name in self._defaults:
                        inputs[name] = self._defaults[name]
                        continue
                    raise RowError(f"input {name!r}: {err}") from None
            if self._types[name] == "string" and (name in self._requests or is_messages(value)):
                # Databricks' request may be a chat request ({messages}) or {query, history}:
                # its judges read the last user turn. azure-ai-evaluation's query and response
                # may be message lists: its judges see the whole conversation as turns of text
                # (query_text), and a reply's assistant text.
                read: Callable[[Any], str]
                if name in REPLY_INPUTS:
                    read = reply_text
                elif name in self._requests:
                    read = request_text
                else:
                    read = query_text
                try:
                    value = read(value)
                except ValueError as err:
                    raise RowError(f"input {name!r} ({ref.text if ref else ''}): {err}") from None
            try:
                inputs[name] = coerce(value, self._types[name])
            except TypeError as err:
                raise RowError(
                    f"input {name!r} ({ref.text if ref else 'literal'}): {err}"
                ) from None
        return inputs

    def _lookup(self, ref: Ref, values: dict[str, Any], line: int) -> Any:
        if ref.source == "data":
            if ref.name not in values:
                raise MissingValue(f"{ref.text}: the row has no column {ref.name!r}")
            return walk(values[ref.name], ref.path, ref.text)
        assert self.prior is not None
        record = self.prior.get(line)
        if record is None:
            raise MissingValue(f"{ref.text}: the earlier run has no row {line}")
        part, _, key = ref.name.partition(".")
        section = record.get(part) or {}
        if key not in section:
            raise MissingValue(f"{ref.text}: the earlier run's row {line} has no {part} {key!r}")
        return walk(section[key], ref.path, ref.text)


def _guess(name: str, columns: list[str]) -> str:
    """The data's column most like input ``name``, or COLUMN when none is."""
    import difflib

    close = difflib.get_close_matches(name, columns, n=1, cutoff=0.6)
    return close[0] if close else "COLUMN"


def _raw_inputs(flow: Flow, key: str = "inputs") -> Any:
    """The flow file's ``inputs`` section (or, with ``key`` "shapes", the whole file), with
    the lines of its keys."""
    from flowkit.flow.source import read_yaml

    try:
        raw = read_yaml(flow.path)
        if key != "inputs":
            return raw if isinstance(raw, dict) else {}
        return raw.get("inputs", {}) if isinstance(raw, dict) else {}
    except Exception:
        return {}


def _display(flow: Flow) -> str:
    from flowkit.errors import display

    return display(flow.path)
