"""`--target`: call the app for every row, then judge its answers, in one run.

``with_target(metric_flow, target, columns)`` builds one flow in memory, as ``compose`` does: a
``target`` node that calls the app, the metric flow as a sub-flow fed from the app's outputs,
and ``agent_metrics`` fed with the measured latency. The app therefore runs like any node:
concurrently, cached (its key holds the app's code, so an edited app runs again) and traced.
A callable is timed by the node that calls it; an app flow is a ``latency: true`` flow node
(its wall time in the row). A cached answer keeps the latency measured when it was computed.
Worker processes (``--backend loky`` …) wrap the metric flow again from ``Flow.target``.

The target is a python callable (``module:function`` or ``file.py:function``, sync or async, or
an object with a ``__call__``, sync or async) or an app flow (a flow file). The key holds what
the callable is: its code (its file and the project modules it reaches) and, for an object or a
bound method, its state (the instance's attributes as canonical JSON); an object whose state
cannot be written so is called uncached, with a notice in the run. Parameters with a default
keep it (an app flow's inputs too): a row without that column gets the app's own default.

A callable's parameters, and an app flow's inputs, become the run's inputs, filled from the data
by name. The app fills the metric inputs the data has no column
for, plus ``answer``/``response`` always: a string reply goes to that one input, a dict reply
or an app flow's outputs go by name, an MLflow trace by Databricks' rules (flowkit.kinds.app).

The app's tokens feed ``agent_metrics`` (per row as ``agent/total_token_count`` …, and the
run's usage and cost): an app flow's own model calls (its node is ``usage: true``, unless it
has a ``usage`` output of its own), a python app's ``usage`` in its reply, its trace's, or the
calls seen while it ran (flowkit.kinds.app). A metric flow that measures the app itself (its
inputs ``latency_seconds`` and ``usage``: rag_suite) is fed them instead of a second
``agent_metrics``, so its own counts and the ``agent/`` names are one count.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from flowkit.cache.canonical import UnstorableValue, canonical_bytes
from flowkit.code import freshness
from flowkit.code.fingerprint import (
    ImportProblem,
    app_fingerprint,
    is_async_callable,
    load_function,
)
from flowkit.code.imports import ModuleClaims, recording_names
from flowkit.errors import UsageError, one_of
from flowkit.flow.aliases import ALIASES, alias_for
from flowkit.flow.graph import Flow
from flowkit.flow.source import YDict
from flowkit.flow.spec import LATENCY_OUTPUT

ANSWER_INPUTS = ("answer", "response")
"""Metric inputs the app always fills: judging the app's own answer is the point."""
APP_FIELDS = ("retrieved_context", "context", "documents")
"""Metric inputs that an app's reply may carry, taken from it when the data has no such column."""
TARGET_NODE = "target"
AGENT_NODE = "agent"
"""The agent_metrics node --target adds where the metric flow does not measure the app."""
AGENT_TOKENS = ("agent/total_token_count", "agent/input_token_count", "agent/output_token_count")
"""agent_metrics' per-row token counts, which a run with --target has among its outputs."""
USAGE = "usage"
"""The target node's output with the tokens the app took for the row (flowkit.kinds.app)."""
AGENT_COLUMNS = ("input_tokens", "output_tokens", "total_tokens")
"""A metric flow's own token inputs (rag_suite's, agent_metrics'): with --target the app's
measured usage is the count, so these data columns (another run's) are not read."""
UNCACHED = "uncached"
"""The code input of a target whose state cannot be fingerprinted (its node is not cached)."""


@dataclass(frozen=True)
class Target:
    """What ``with_target`` wrapped a flow with, enough for a worker process to do it again."""

    target: str
    columns: tuple[str, ...]
    base: str
    """The directory the target is named relative to (the driver's working directory)."""
    notices: tuple[str, ...] = ()
    """What the run must say about the target (an object whose state cannot be cached)."""


_given: dict[str, Any] = {}
"""Callables given from Python (``flowkit.run(..., target=fn)``) by the name the run records."""
_apps: dict[tuple[str, str], Any] = {}
"""(target, code fingerprint) → the app, filled by ``with_target`` in each process that runs
the flow (the driver, every worker), so a row calls it without importing it again."""


def _load(target: str, base: Path) -> Any:
    module, sep, name = target.rpartition(":")
    if not sep:
        raise UsageError(
            f"--target {target!r} must read module:function, file.py:function or a flow"
        )
    try:
        if module.endswith(".py"):
            # Its folder importable, as `python app.py` makes it (for the modules beside it).
            folder = str((base / module).parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            return load_function(name, module, base)
        if str(base) not in sys.path and (base != Path.cwd() or "" not in sys.path):
            sys.path.insert(0, str(base))  # as `python -m` would, for the user's app
        return load_function(target, None, base)
    except ImportProblem as err:
        raise UsageError(f"--target {target!r}: {err}") from None


def app_named(target: str, code: str) -> Any:
    """The app a row calls (flowkit.kinds.app), loaded again where it is not yet known."""
    fn = _apps.get((target, code))
    return fn if fn is not None else _load(target, Path.cwd())


def _is_flow(target: str) -> bool:
    return target.endswith((".yaml", ".yml")) and ":" not in target


def _params(fn: Any) -> dict[str, dict[str, Any]]:
    """The app's parameters as the run's inputs: required, or with the app's own default. A
    default JSON cannot carry is left to the app (the parameter is then filled only by name
    from the data, never with a stand-in)."""
    sig = inspect.signature(fn)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    out: dict[str, dict[str, Any]] = {}
    for name, p in sig.parameters.items():
        if p.kind not in kinds:
            continue
        if p.default is inspect.Parameter.empty:
            out[name] = {"type": "any"}
        elif _json(p.default):
            out[name] = {"type": "any", "default": p.default}
    return out


def _json(value: Any) -> bool:
    try:
        canonical_bytes(value)
    except (TypeError, UnstorableValue):
        return False
    return True


def cached_notice(cached_nodes: dict[str, int]) -> list[str]:
    """What a run with a target says of the rows whose app reply came from the cache: their
    latency is the one measured then (each such row's trace record is a ``cache_hit``)."""
    n = cached_nodes.get(TARGET_NODE, 0)
    if not n:
        return []
    if n == 1:
        return ["1 row's app reply came from the cache; its latency is the original call's"]
    return [f"{n} rows' app replies came from the cache; their latency is the original call's"]


def with_target(
    metric: Flow, target: str, columns: list[str] | tuple[str, ...], base: Path | None = None
) -> Flow:
    """``metric`` preceded by a node that calls ``target`` (named relative to ``base``, the
    working directory by default) per row; see the module docstring. A callable given from
    Python is found by its name (:func:`callable_target`)."""
    with freshness.recording() as seen:
        flow = _with_target(metric, target, columns, base or Path.cwd())
    return replace(flow, code_files=tuple(sorted(seen.items())))


def callable_target(app: Any, backend: str) -> str:
    """``module:qualname`` of a callable given from Python, as ``--target`` would name it; it
    runs in this process only (a worker process could not be sent it)."""
    if not callable(app):
        raise UsageError(
            f"target must be a callable or 'module:function', not {type(app).__name__}"
        )
    if backend != "local":
        raise UsageError(
            "a target given as a callable cannot be sent to worker processes; name it as "
            f"'module:function' for backend {backend!r}"
        )
    owner = app if inspect.isroutine(app) else type(app)
    name = f"{getattr(owner, '__module__', '__main__')}:{owner.__qualname__}"
    _given[name] = app  # a notebook's redefinition replaces the one before
    return name


def _with_target(
    metric: Flow, target: str, columns: list[str] | tuple[str, ...], base: Path
) -> Flow:
    from flowkit.flow.loader import LoadContext, _raise, load_flow, without_paths

    # An input the data fills under another tool's name (rag_suite's request from a `query`
    # column) is the data's, as without --target: the app is not asked for it.
    provides = [
        k
        for k, spec in metric.inputs.items()
        if k in ANSWER_INPUTS
        or (
            k not in columns and not alias_for(k, columns)[1] and (k in APP_FIELDS or spec.required)
        )
    ]
    if not any(k in ANSWER_INPUTS for k in provides):
        raise UsageError(
            f"flow {metric.name!r} judges no answer or response, so there is nothing for "
            "--target to fill",
        )
    inputs: dict[str, Any] = {}
    out: dict[str, str | None]  # metric input → what the app gives it (None: nothing)
    notices: list[str] = []
    claims = ModuleClaims()  # the app's modules and the metric flow's are one tree
    if _is_flow(target):
        app = load_flow(base / target)
        # The app flow's own input specs: its defaults, never a None in their place.
        app_inputs = {k: s.model_dump(exclude_unset=True) for k, s in app.inputs.items()}
        out = _app_flow_outputs(app, provides, metric)
        provides = list(out)
        app_node = {
            "name": TARGET_NODE,
            "type": "flow",
            # Relative, so workers find it among the files sent (one content hash on every host)
            "flow": os.path.relpath(app.sources[0], base),
            "inputs": {k: f"${{inputs.{k}}}" for k in app_inputs},
            "latency": True,
            # What its model calls took, unless it says so itself.
            "usage": USAGE not in app.outputs,
        }
    else:
        with recording_names() as reached:
            fn = _given[target] if target in _given else _load(target, base)
            code, why = app_fingerprint(fn, roots=(base,))
        claims.claim(reached, f"--target {target!r}")
        app_inputs = _params(fn)
        call = "call_target_async" if is_async_callable(fn) else "call_target"
        if code is None:
            notices.append(
                f"--target {target!r}: {why}, so its answers are not cached (give it plain "
                "data to hold, in its attributes, closure and globals, to cache them)"
            )
        app_node = {
            "name": TARGET_NODE,
            "type": "python",
            "function": f"flowkit.kinds.app:{call}",
            "description": f"Calls the app {target} and times it.",
            # An app waits on its model or tools: a sync one runs in a thread, not inline.
            "blocking": call == "call_target",
            "inputs": {
                "flowkit_target": target,
                "flowkit_code": code or UNCACHED,
                "flowkit_provides": provides,
                **{k: f"${{inputs.{k}}}" for k in app_inputs},
            },
            "cache": code is not None,
        }
        _apps[(target, code or UNCACHED)] = fn
        out = {k: f"${{{TARGET_NODE}.output.{k}}}" for k in provides}
    latency = f"${{{TARGET_NODE}.output.{LATENCY_OUTPUT}}}"
    usage = f"${{{TARGET_NODE}.output.{USAGE}}}"
    # A metric flow that measures the app itself (rag_suite: latency and usage inputs feeding
    # its agent_metrics) is given the app's measured ones: one source for the row's counts.
    measures = LATENCY_OUTPUT in metric.inputs and USAGE in metric.inputs
    if measures:
        out.update({LATENCY_OUTPUT: latency, USAGE: usage})
        out.update({k: None for k in AGENT_COLUMNS if k in metric.inputs})
    inputs.update(app_inputs)
    for name, spec in metric.inputs.items():
        if name not in out and name not in inputs:
            inputs[name] = spec.model_dump(exclude_unset=True)
    metric_outputs, pickers = _metric_outputs(metric)
    metric_nodes = _metric_nodes(metric, out)
    nodes: list[dict[str, Any]] = [app_node, *metric_nodes, *pickers]
    # The node holding the app's per-row counts: the metric flow's own, else agent_metrics.
    counter = next((n["name"] for n in metric_nodes if _measures(n["inputs"], latency)), None)
    if counter is None:
        counter = AGENT_NODE
        nodes.append(
            {
                "name": counter,
                "type": "flow",
                "flow": "agent_metrics",
                "inputs": {"latency_seconds": latency, "usage": usage},
            }
        )
    # Per row, as Databricks names them, unless the metric flow's own outputs carry them.
    tokens = {
        k: _picker(f"agent_output_{i}", counter, k)
        for i, k in enumerate(AGENT_TOKENS)
        if k not in metric_outputs
    }
    nodes += tokens.values()
    outputs = {
        **metric_outputs,
        **{f"app_{k}": out[k] for k in provides},
        LATENCY_OUTPUT: latency,
        **{k: f"${{{n['name']}.output}}" for k, n in tokens.items()},
    }
    name = f"{metric.name}_on_target"
    raw = YDict(
        name=name,
        description=f"{metric.name} on the answers of {target}",
        inputs=inputs,
        outputs=outputs,
        nodes=nodes,
    )
    raw.file, raw.line, raw.key_lines = name, 0, {}
    ctx = LoadContext()
    ctx.modules = claims
    flow = ctx.build(raw, base / f"{name}.yaml", name)
    _raise(ctx, name)
    assert flow is not None
    return replace(
        without_paths(flow),
        sources=metric.sources,
        target=Target(target, tuple(columns), str(base), tuple(notices)),
    )


def _app_flow_outputs(app: Flow, provides: list[str], metric: Flow) -> dict[str, str | None]:
    """Metric input → the app flow's output that fills it: the one of its name; for the answer,
    else the app's answer under its other name (answer/response) or its only output. An
    optional field the app does not output (rag_suite's retrieved_context) is left to the
    data, as a python app's reply without it is; a required one is refused up front."""
    ref = {k: f"${{{TARGET_NODE}.output.{k}}}" for k in app.outputs}
    out: dict[str, str | None] = {k: ref[k] for k in provides if k in app.outputs}
    answer = next((k for k in ANSWER_INPUTS if k in app.outputs), None)
    if answer is None and len(app.outputs) == 1:
        answer = next(iter(app.outputs))
    for k in provides:
        if k not in out and k in ANSWER_INPUTS and answer is not None:
            out[k] = ref[answer]
        found = [c for c in ALIASES.get(k, ()) if c in app.outputs]
        if k not in out and k in APP_FIELDS and len(found) == 1:
            out[k] = ref[found[0]]  # its context under another tool's name
    needed = [k for k in provides if k in ANSWER_INPUTS or metric.inputs[k].required]
    missing = [k for k in needed if k not in out]
    if missing:
        raise UsageError(
            f"app flow {app.name!r} has no output {missing[0]!r} for flow {metric.name!r}",
            hint=f"its outputs are: {one_of(app.outputs)}",
        )
    return {k: v for k, v in out.items() if k in provides}


def _measures(inputs: dict[str, Any], latency: str) -> bool:
    """Whether a metric node is fed the app's measured latency (and usage with it)."""
    return inputs.get(LATENCY_OUTPUT) == latency


def _metric_nodes(metric: Flow, out: dict[str, str | None]) -> list[dict[str, Any]]:
    """The metric flow as a sub-flow node fed from the app's reply where the app provides an
    input; several composed flows (`flowkit run A B --target APP`), one node each."""
    if not metric.composed:
        inputs = {k: out.get(k, f"${{inputs.{k}}}") for k in metric.inputs}
        return [{"name": metric.name, "type": "flow", "flow": metric.sources[0], "inputs": inputs}]
    nodes = []
    for node in metric.nodes.values():
        wired = {p: ref.name for p, ref, _ in node.inputs if ref is not None}
        inputs = {p: out.get(name, f"${{inputs.{name}}}") for p, name in wired.items()}
        nodes.append({"name": node.name, "type": "flow", "flow": node.spec.flow, "inputs": inputs})
    return nodes


def _metric_outputs(metric: Flow) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The metric outputs as a run without --target has them: one flow's at the top level,
    several flows' under each flow's name (the app's own outputs go beside them); and the nodes
    that read an output whose name a reference cannot spell (Databricks' `a/b/c`)."""
    if metric.composed:
        return {node: f"${{{node}.output}}" for node in metric.nodes}, []
    taken = [k for k in metric.outputs if k.startswith("app_")]
    if taken:
        raise UsageError(
            f"flow {metric.name!r} has an output {taken[0]!r}, which --target's own output of "
            "that name would hide; rename it in the flow"
        )
    outputs, pickers = {}, []
    for i, key in enumerate(metric.outputs):
        if key == LATENCY_OUTPUT:  # (rag_suite's, read from the data) the app's, measured, wins
            continue
        if re.fullmatch(r"[A-Za-z_][\w\-]*", key):
            outputs[key] = f"${{{metric.name}.output.{key}}}"
            continue
        pickers.append(_picker(f"{TARGET_NODE}_output_{i}", metric.name, key))
        outputs[key] = f"${{{pickers[-1]['name']}.output}}"
    return outputs, pickers


def _picker(name: str, node: str, key: str) -> dict[str, Any]:
    """A node that reads ``node``'s output ``key``, a name a reference cannot spell."""
    return {
        "name": name,
        "type": "python",
        "function": "flowkit.flow.target:output_named",
        "inputs": {"outputs": f"${{{node}.output}}", "key": key},
    }


def output_named(outputs: dict[str, Any] | None, key: str) -> Any:
    """One of a sub-flow's outputs, by a name a reference cannot spell; None where the
    sub-flow was skipped in the row (its ``when:`` was false), as its other outputs read."""
    return None if outputs is None else outputs.get(key)
