"""Reading a run's traces back: one row's DAG as a tree (`flowkit trace --row`), the failed rows
and the rows whose outputs match a condition (`--failed`, `--where`), and the slowest nodes and
grouped errors that `flowkit show` prints.

traces.jsonl holds one record per node per row and can run to gigabytes, so it is only ever
read as a stream: a row's records are found by a byte-level prefilter before any JSON is decoded.
The `show` summary is kept by the run itself (flowkit.runs.summary).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from flowkit.cache.canonical import loads
from flowkit.data.jsonl import iter_jsonl
from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.inspect.gates import OPERATORS, split_condition
from flowkit.runs.summary import summarize

_STATUS_STYLE = {"ok": "green", "failed": "bold red", "skipped": "dim", "upstream_failed": "yellow"}
_ROW_STATUS_STYLE = {"ok": "green", "failed": "bold red", "bad_input": "bold red"}
# The executor wraps an inner node's failure as the sub-flow node's own; the inner one is the cause.


class _Titled(Table):
    """A borderless table with its title on a line of its own: rich would wrap a title to the
    table's width, and a narrow table's title would break over several lines."""

    def __init__(self, heading: str | None, *columns: str) -> None:
        super().__init__(*columns, box=None)
        self.heading = heading

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.heading:
            yield Text(self.heading, style="table.title")
        yield from super().__rich_console__(console, options)


def titled(title: str | None, *columns: str) -> Table:
    return _Titled(title, *columns)


def fold(value: Any, max_chars: int) -> str:
    """``value`` as text, cut at ``max_chars`` with a marker saying how much was left out."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if max_chars > 0 and len(text) > max_chars:
        return f"{text[:max_chars]}…({len(text) - max_chars} more chars)"
    return text


def _scan(path: Path, line: int) -> Iterator[dict[str, Any]]:
    """Records of a JSONL file whose ``line`` is ``line``; a regex on the raw bytes skips the
    others without decoding them (a string value that merely contains the text is decoded, then
    dropped by the exact check)."""
    if not path.is_file():
        return
    probe = re.compile(rb'"line":\s*' + str(line).encode() + rb"\s*[,}]")
    with open(path, "rb") as f:
        for raw in f:
            if not probe.search(raw):
                continue
            try:
                record = loads(raw)
            except ValueError:  # a torn last line, or not JSON
                continue
            if isinstance(record, dict) and record.get("line") == line:
                yield record


def row_records(run_dir: Path, line: int) -> list[dict[str, Any]]:
    """The trace records of one row, in execution order (by start time)."""
    return sorted(_scan(run_dir / "traces.jsonl", line), key=lambda r: r.get("start") or 0.0)


def row_output(run_dir: Path, line: int) -> dict[str, Any] | None:
    """The row's outputs.jsonl record (its status, inputs, outputs, error), if it has one."""
    return next(_scan(run_dir / "outputs.jsonl", line), None)


def select_node(records: list[dict[str, Any]], node: str, line: int) -> list[dict[str, Any]]:
    """The records of ``node`` and, for a sub-flow node, of the nodes inside it."""
    picked = [r for r in records if r["node"] == node or r["node"].startswith(node + ".")]
    if not picked:
        names = [r["node"] for r in records]
        raise UsageError(
            f"row {line} has no node {node!r}{did_you_mean(node, names)}",
            hint=f"its nodes: {one_of(names)}",
        )
    return picked


def _label(rec: dict[str, Any]) -> Text:
    status = rec.get("status", "?")
    text = Text.assemble(
        (rec["node"], "bold"),
        (f"  {rec.get('kind', '?')}  ", "dim"),
        (status, _STATUS_STYLE.get(status, "")),
    )
    if status not in ("skipped", "upstream_failed"):
        text.append(f"  {rec.get('duration') or 0.0:.3f}s")
    if rec.get("cache_hit"):
        text.append("  cache hit", "cyan")
    return text


def _field(name: str, value: Any, max_chars: int) -> Text:
    return Text.assemble((f"{name}: ", "dim"), fold(value, max_chars))


def _node_tree(rec: dict[str, Any], max_chars: int, verbose: bool) -> Tree:
    tree = Tree(_label(rec))
    error = rec.get("error")
    if rec.get("status") == "upstream_failed":
        tree.add(Text((error or {}).get("message", "an upstream node failed"), "yellow"))
        return tree
    if rec.get("status") == "skipped":
        return tree
    if rec.get("inputs"):
        inputs = tree.add(Text("inputs", "dim"))
        for key, value in rec["inputs"].items():
            inputs.add(_field(key, value, max_chars))
    elif "inputs" not in rec:
        tree.add(Text("inputs not kept (run with --trace full to keep them)", "dim"))
    llm = rec.get("llm")
    if llm:
        prompt = tree.add(Text(f"prompt ({llm.get('model', '?')})", "dim"))
        for msg in llm.get("messages") or ():
            prompt.add(_field(str(msg.get("role", "?")), msg.get("content", ""), max_chars))
        if llm.get("raw") is not None:
            tree.add(_field("raw response", llm["raw"], max_chars))
        usage = llm.get("usage") or {}
        tree.add(
            Text(
                f"tokens: {usage.get('prompt_tokens', 0)} prompt + "
                f"{usage.get('completion_tokens', 0)} completion = "
                f"{usage.get('total_tokens', 0)} · finish {llm.get('finish_reason') or '—'} · "
                f"attempts {llm.get('attempts', 1)}",
                "dim",
            )
        )
    if rec.get("status") == "ok" or rec.get("output") is not None:
        tree.add(_field("response" if llm else "output", rec.get("output"), max_chars))
    if error:
        tree.add(Text(f"error: {error.get('type')}: {error.get('message')}", "red"))
        if verbose and error.get("traceback"):
            tree.add(Text(error["traceback"].rstrip(), "red dim"))
    return tree


def row_tree(
    records: list[dict[str, Any]],
    row: dict[str, Any] | None,
    line: int,
    *,
    max_chars: int = 300,
    verbose: bool = False,
) -> Tree:
    """The row as a tree: nodes in start order, a sub-flow's nodes (``parent.child``) under it."""
    status = (row or {}).get("status") or ("aggregates" if line < 0 else "?")
    root = Tree(
        Text.assemble((f"row {line}", "bold"), "  ", (status, _ROW_STATUS_STYLE.get(status, "")))
    )
    if row and row.get("error"):
        err = row["error"]
        where = f"node {err['node']}: " if err.get("node") else ""
        root.add(Text(f"{where}{err.get('type')}: {err.get('message')}", "red"))
    trees: dict[str, Tree] = {}
    for rec in records:
        trees[rec["node"]] = _node_tree(rec, max_chars, verbose)
    for rec in records:
        parent = rec["node"].rpartition(".")[0]
        while parent and parent not in trees:
            parent = parent.rpartition(".")[0]
        (trees[parent] if parent else root).children.append(trees[rec["node"]])
    return root


# -- --failed and --where -------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """``path op value`` over a row's outputs; ``path`` is dotted (``groundedness.score``)."""

    path: str
    op: str
    value: Any

    def __str__(self) -> str:
        return f"{self.path}{self.op}{self.value!r}"

    def holds(self, outputs: Any) -> bool:
        found, actual = lookup(outputs, self.path)
        if not found:
            return False
        if isinstance(self.value, (int, float)) and not isinstance(self.value, bool):
            if not isinstance(actual, (int, float)) or isinstance(actual, bool):
                return False
        elif self.op not in ("==", "!=") and type(actual) is not type(self.value):
            return False
        return OPERATORS[self.op](actual, self.value)


def parse_where(text: str) -> Condition:
    parts = split_condition(text)
    if parts is None:
        raise UsageError(
            f"--where {text!r} must read PATH<OP>VALUE, e.g. 'groundedness.score<3'",
            hint=f"operators: {', '.join(OPERATORS)}; "
            "VALUE is a number, a string, true, false or null",
        )
    path, op, raw = parts
    value: Any
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        value = raw[1:-1]
    elif op in ("<", "<=", ">", ">=") and not _is_number(raw):
        raise UsageError(
            f"--where {text!r}: {raw!r} is not a number, and {op} compares numbers",
            hint="quote it to compare text: --where \"path>='b'\"",
        )
    elif raw in ("true", "false", "null"):
        value = {"true": True, "false": False, "null": None}[raw]
    else:
        try:
            value = int(raw)
        except ValueError:
            try:
                value = float(raw)
            except ValueError:
                value = raw
    return Condition(path, op, value)


def _is_number(raw: str) -> bool:
    try:
        float(raw)
    except ValueError:
        return False
    return True


def output_paths(run_dir: Path, sample: int = 50) -> list[str]:
    """The dotted paths into the outputs of the run's first rows, first-seen order."""
    seen: dict[str, None] = {}

    def add(value: Any, prefix: str) -> None:
        for key, sub in value.items():
            seen[prefix + key] = None
            if isinstance(sub, dict):
                add(sub, f"{prefix}{key}.")

    for index, rec in enumerate(iter_jsonl(run_dir / "outputs.jsonl")):
        if index >= sample:
            break
        if isinstance(rec.get("outputs"), dict):
            add(rec["outputs"], "")
    return list(seen)


def check_paths(conditions: list[Condition], run_dir: Path, flow: str) -> list[Condition]:
    """Each condition's path as the outputs spell it: ``groundedness.score`` on a groundedness
    run is its ``score``; a path no row has is an error that lists those the rows have."""
    known = output_paths(run_dir)
    if not known:
        return conditions
    checked = []
    for cond in conditions:
        path = cond.path
        if path not in known and path.startswith(f"{flow}.") and path[len(flow) + 1 :] in known:
            path = path[len(flow) + 1 :]
        if path not in known:
            raise UsageError(
                f"--where {cond}: run {run_dir.name} has no output {path!r}"
                f"{did_you_mean(path, [*known, *(f'{flow}.{k}' for k in known)])}; "
                f"its outputs: {', '.join(known)}"
            )
        checked.append(Condition(path, cond.op, cond.value))
    return checked


def lookup(value: Any, path: str) -> tuple[bool, Any]:
    """Follow a dotted path through dicts (and lists, by index); (found, value)."""
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def failed_rows(run_dir: Path) -> Iterator[dict[str, Any]]:
    """outputs.jsonl records of rows that failed or had bad input."""
    for rec in iter_jsonl(run_dir / "outputs.jsonl"):
        if rec.get("status") != "ok":
            yield rec


def where_rows(
    run_dir: Path, conditions: list[Condition], *, only_failed: bool = False
) -> Iterator[dict[str, Any]]:
    """outputs.jsonl records whose outputs satisfy every condition."""
    rows = failed_rows(run_dir) if only_failed else iter_jsonl(run_dir / "outputs.jsonl")
    for rec in rows:
        if all(c.holds(rec.get("outputs")) for c in conditions):
            yield rec


def rows_table(
    rows: Iterator[dict[str, Any]], paths: list[str], *, limit: int = 0, max_chars: int = 80
) -> tuple[Table, int]:
    """A table of rows (line, status, the values at ``paths``, the error); and how many rows
    matched in all, past ``limit`` too, so the caller can say how many were not shown."""
    table = titled(None, "line", "status", *paths, "node", "error")
    total = 0
    for rec in rows:
        total += 1
        if limit and total > limit:
            continue
        status = rec.get("status", "?")
        err = rec.get("error") or {}
        values = [fold(lookup(rec.get("outputs"), p)[1], max_chars) for p in paths]
        message = f"{err['type']}: {err.get('message')}" if err.get("type") else ""
        table.add_row(
            str(rec.get("line")),
            Text(status, _ROW_STATUS_STYLE.get(status, "")),
            *values,
            err.get("node") or "",
            Text(fold(message, max_chars), "red"),
        )
    return table, total


# -- the `flowkit show` sections --------------------------------------------------------------
_SCORE_KEYS = ("mean", "pass_rate", "invalid", "count")


def score_prefixes(metrics: dict[str, Any]) -> list[str]:
    """Metric prefixes (``groundedness`` of ``groundedness.mean``) that carry score keys."""
    prefixes = [k.rpartition(".")[0] for k in metrics if k.rpartition(".")[2] in _SCORE_KEYS[:3]]
    return [p for p in dict.fromkeys(prefixes) if p]


@dataclass
class ShowSections:
    """`flowkit show`'s tables that need the traces (None when there is nothing to show)."""

    scores: Table | None = None
    slowest: Table | None = None
    errors: Table | None = None


def show_sections(
    run_dir: Path, info: dict[str, Any], metrics: dict[str, Any], *, top: int = 5
) -> ShowSections:
    summary = summarize(run_dir, top=top)
    counts = info.get("counts") or {}
    out = ShowSections()
    prefixes = score_prefixes(metrics)
    if prefixes:
        out.scores = titled("scores", "metric", "mean", "pass rate", "invalid", "count", "failed")
        for prefix in prefixes:
            keys = [f"{prefix}.{k}" for k in _SCORE_KEYS]
            if prefix in summary.failed_by_node:
                failed = str(summary.failed_by_node[prefix])
            elif prefix == (info.get("flow") or {}).get("name"):
                failed = str(counts.get("failed", 0) + counts.get("bad_input", 0))
            else:  # a sub-flow node that never failed, or a prefix that names no node
                failed = "0" if counts else "—"
            out.scores.add_row(prefix, *(_num(metrics.get(k)) for k in keys), failed)
    if summary.slowest:
        title = "slowest nodes (cache hits left out)"
        out.slowest = titled(title, "node", "kind", "runs", "total s", "mean s")
        for t in summary.slowest:
            out.slowest.add_row(t.node, t.kind, f"{t.runs:,}", f"{t.total:.3f}", f"{t.mean:.4f}")
    if summary.errors:
        out.errors = titled("errors", "node", "type", "count", "rows", "example")
        for g in summary.errors:
            rows = ", ".join(map(str, g.lines)) + (", …" if g.count > len(g.lines) else "")
            out.errors.add_row(
                g.node, g.type, str(g.count), rows, Text(fold(g.example, 160), "red")
            )
    return out


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "—" if value is None else str(value)
