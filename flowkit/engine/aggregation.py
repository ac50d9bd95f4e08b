"""The aggregate phase: after all rows, each aggregate node sees its inputs as per-row lists.

Lists of one call are aligned: index i is the same row in each. A row is left out of an
aggregate when any node it reads failed or was skipped in that row; the count left out is
reported in run.json. Metrics are named `<flow or sub-flow node>.<key>`; a key holding `/` (a
Databricks metric name) is also reported as it is, unprefixed. An aggregate that returns a key
an earlier one of its flow wrote fails, and none of its metrics are reported: a metric is never
silently overwritten (the loader refuses the clash when both declare their keys).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from flowkit import kinds
from flowkit.cache.canonical import to_json_value
from flowkit.cache.result_cache import MISS
from flowkit.cache.store import node_key
from flowkit.engine.node_runner import refreshed
from flowkit.engine.records import FAILED, OK, ErrorInfo, NodeRecord
from flowkit.engine.scope import run_notices
from flowkit.flow.declared import node_keys
from flowkit.flow.refs import MissingValue, walk
from flowkit.flow.wiring import COLLISION_FIX

if TYPE_CHECKING:
    from flowkit.engine.executor import AggTask, Executor
    from flowkit.engine.sink import RunSink
    from flowkit.flow.graph import Node

TOOL_NAME = re.compile(r"[a-z_]+(/[a-z_]+)+")
"""A metric name another tool defines, a path of words (Databricks'
``agent/latency_seconds/average``): reported once, under that name."""
AGGREGATE_LINE = -1
"""The `line` of aggregate nodes' trace records: they belong to no single row."""


def _inputs(agg: AggTask, done: dict[tuple[tuple[str, ...], str], Any]) -> dict[str, Any]:
    rows = agg.ordered()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(agg.row_refs)
    by_ref = {ref.text: list(col) for ref, col in zip(agg.row_refs, columns, strict=True)}
    inputs: dict[str, Any] = {}
    for param, ref, literal in agg.node.inputs:
        if ref is None:
            inputs[param] = literal
        elif ref.text in by_ref:
            inputs[param] = by_ref[ref.text]
        else:  # another aggregate node of the same flow
            value = done.get((agg.path, ref.name))
            if value is None:
                raise MissingValue(f"{ref.text}: aggregate node {ref.name!r} produced nothing")
            inputs[param] = walk(value, ref.path, ref.text)
    return inputs


def run_aggregates(executor: Executor) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run every aggregate node of the flow tree; return (metrics, per-node details)."""
    metrics: dict[str, Any] = {}
    info: dict[str, Any] = {}
    done: dict[tuple[tuple[str, ...], str], Any] = {}
    owners: dict[str, str] = {}  # metric name → the aggregate node that wrote it
    bare_owners: dict[str, str] = {}  # unprefixed metric name → its writer ("" once ambiguous)
    tools: dict[str, list[str]] = {}  # another tool's metric name → its prefixed copies
    writer, cache = executor.writer, executor.cache
    for agg in executor.aggregates:
        qual = ".".join((*agg.path, agg.node.name))
        start = time.time()
        detail: dict[str, Any] = {"rows_used": len(agg.columns), "rows_left_out": agg.left_out}
        status, output, error, hit, inputs = OK, None, None, False, None
        if not agg.columns and agg.left_out and agg.left_out == agg.skipped:
            # Every row skipped or failed what it reads (a suite metric whose field the data
            # lacks): report that, rather than a row of empty metrics.
            info[qual] = {**detail, "status": "skipped", "reason": "no row produced its inputs"}
            continue
        try:
            inputs = _inputs(agg, done)
            key = node_key(agg.node.static_key, inputs) if cache is not None else None
            cached = (
                cache.get(key)
                if cache is not None
                and key is not None
                and not refreshed(executor.options, agg.node, qual)
                else MISS
            )
            if cached is not MISS:
                output, hit = cached[0], True
            else:
                output = to_json_value(
                    kinds.get("aggregate").run_sync(agg.node, inputs, executor.ctx).output
                )
                if cache is not None and key is not None:
                    cache.put(key, output)
        except Exception as err:
            status, error = FAILED, ErrorInfo.from_exception(err)
            detail["error"] = f"{error.type}: {error.message}"
        refused = _undeclared(agg.node.node, output) or _clash(output, agg, owners, qual)
        if refused is not None:
            kind, why = refused
            status, error = FAILED, ErrorInfo(kind, why)
            detail["error"] = f"{error.type}: {error.message}"
            run_notices(writer).append(f"warning: aggregate node {qual!r} failed: {why}")
        if output is not None:
            done[(agg.path, agg.node.name)] = output
        if output is not None and refused is None:
            bare = agg.node.spec.metrics == "logged" and not agg.shown_path
            for k, v in output.items():
                metrics[f"{agg.prefix}.{k}"] = v
                owners[f"{agg.prefix}.{k}"] = qual
                if bare or "/" in k:
                    # A logged metric keeps its bare name (Prompt Flow's habit), and a name
                    # another tool defines (Databricks' agent metrics) is spelt as dashboards
                    # and gates use it: both also reported unprefixed, unless two flows of
                    # the run write it (then only their prefixed names are reported).
                    _bare(metrics, bare_owners, k, v, qual, writer)
                    if TOOL_NAME.fullmatch(k):
                        tools.setdefault(k, []).append(f"{agg.prefix}.{k}")
        detail["status"] = status
        info[qual] = detail
        end = time.time()
        writer.trace(
            NodeRecord(
                run_id=writer.run_id,
                line=AGGREGATE_LINE,
                node=qual,
                kind="aggregate",
                status=status,
                start=start,
                end=end,
                duration=end - start,
                cache_hit=hit,
                inputs=_summarise(inputs),
                output=output,
                error=error,
            )
        )
    # Another tool's name is reported once, as that tool spells it; its prefixed copies stay
    # only where several flows write it (then the bare name is not reported).
    for key, copies in tools.items():
        if bare_owners.get(key):
            for copy in copies:
                metrics.pop(copy, None)
    return metrics, info


def _undeclared(node: Node, output: Any) -> tuple[str, str] | None:
    """Why ``output`` may not be reported (keys its function does not declare), or None: the
    loader checked references and clashes against the declaration, so it must hold."""
    declared = node_keys(node)
    if declared is None or not isinstance(output, dict):
        return None
    extra = sorted(str(k) for k in output if k not in declared)
    if not extra:
        return None
    return "UndeclaredMetricKeys", (
        f"aggregate function {node.spec.function} returned "
        f"{'key' if len(extra) == 1 else 'keys'} {', '.join(map(repr, extra))} that its "
        f"@returns_keys does not declare (it declares: {', '.join(sorted(declared)) or 'none'}), "
        "so none of this node's metrics were reported. Declare every key it returns, or stop "
        "returning the others"
    )


def _clash(output: Any, agg: AggTask, owners: dict[str, str], qual: str) -> tuple[str, str] | None:
    """Why ``output`` may not be reported (a metric another aggregate already wrote), or None."""
    if not isinstance(output, dict):
        return None
    prefix = agg.prefix
    taken = sorted(k for k in output if owners.get(f"{prefix}.{k}", qual) != qual)
    if not taken:
        return None
    others = sorted({owners[f"{prefix}.{k}"] for k in taken})
    if agg.node.spec.metrics == "logged":  # its keys are the names it logs: no declaration
        declare = "Log the metric under a name of its own. "
    elif node_keys(agg.node.node) is None:
        declare = (
            "Declare each aggregate function's keys with @returns_keys (flowkit.metrics.keys), "
            "so that validation finds this before the run. "
        )
    else:
        declare = ""
    return "MetricKeyClash", (
        f"metric {'key' if len(taken) == 1 else 'keys'} {', '.join(map(repr, taken))} already "
        f"written by aggregate node {', '.join(map(repr, others))}, so none of this node's "
        f"metrics were reported. {declare}{COLLISION_FIX}"
    )


def _bare(
    metrics: dict[str, Any],
    owners: dict[str, str],
    key: str,
    value: Any,
    qual: str,
    writer: RunSink,
) -> None:
    """Report ``key`` unprefixed, unless another aggregate of the run writes it too: a gate or a
    dashboard on the bare name would read whichever flow came first."""
    owner = owners.get(key)
    if owner is None:
        owners[key] = qual
        metrics[key] = value
    elif owner not in ("", qual):
        owners[key] = ""
        metrics.pop(key, None)
        run_notices(writer).append(
            f"warning: metric {key!r} is written by aggregate nodes {owner!r} and {qual!r}; it "
            "is reported only under each flow's prefix (gate on those names)"
        )


def _summarise(inputs: dict[str, Any] | None) -> dict[str, Any] | None:
    """Per-row lists can hold a million values; the trace keeps their length and a sample."""
    if inputs is None:
        return None
    return {
        k: ({"rows": len(v), "first": v[:5]} if isinstance(v, list) else v)
        for k, v in inputs.items()
    }
