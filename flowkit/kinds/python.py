"""`python` and `aggregate` nodes: a user's function called with the node's inputs.

How a function runs is decided once, at load, and never changes during a run: `async def`
functions are awaited; a sync function declared `blocking: true` (it waits on a network, a disk,
a subprocess) runs in the run's thread pool, so other rows go on meanwhile; any other sync
function (the usual metric code) runs inline in the event loop's thread, since handing each
call to a thread would cost more than the call. `--target` apps and Prompt Flow tools are
declared blocking by what builds their nodes. An inline function that proves slow is timed per
run (in the run's binding, flowkit.engine.bound) and named in the run's notices.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import inspect
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.code.fingerprint import ImportProblem, is_async_callable, load_from_folder
from flowkit.flow.spec import AggregateNode, PythonNode
from flowkit.kinds import Binding, Compiled, Kind, NodeResult, register
from flowkit.kinds.calls import as_llm_meta, collecting_calls
from flowkit.kinds.metric_log import collecting

if TYPE_CHECKING:
    from flowkit.engine.bound import BoundNode, CallTiming
    from flowkit.engine.context import RunContext
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext


class _Callable:
    """The function and its signature, read once at load; never changed afterwards (it is
    shared by every run of the flow)."""

    __slots__ = ("defaults", "fn", "is_coroutine", "params", "var_kw")

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.is_coroutine = is_async_callable(fn)
        try:
            sig = inspect.signature(fn)
            self.params = {
                n
                for n, p in sig.parameters.items()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            }
            self.var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
            self.defaults = {n for n, p in sig.parameters.items() if p.default is not p.empty}
        except (TypeError, ValueError):
            self.params, self.var_kw, self.defaults = set(), True, set()


def _compile_function(node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
    spec = node.spec
    try:
        loaded = load_from_folder(base_dir, spec.function, spec.source)
    except ImportProblem as err:
        ctx.error(node, str(err), key="source" if spec.source else "function")
        return None
    fn = loaded.fn
    impl = _Callable(fn)
    if not impl.var_kw:
        unknown = sorted(set(spec.inputs) - impl.params)
        for name in unknown:
            from flowkit.errors import did_you_mean

            ctx.error(
                node,
                f"input {name!r} is not a parameter of {spec.function}"
                f"{did_you_mean(name, impl.params)}",
                key="inputs",
                sub=name,
            )
    parts = {"function": spec.function, "code": loaded.fingerprint}
    blocking = bool(getattr(spec, "blocking", False))
    return Compiled(impl, parts, is_async=impl.is_coroutine or blocking)


def _own(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs with every list and dict copied.

    Values are shared: other nodes of the row read the same objects, the trace records them and
    a cache key was computed from them (possibly before this node started). A function that
    sorts or edits an input in place must change none of that, so it gets its own copy. Text
    and numbers are immutable and cost nothing.
    """
    if not any(isinstance(v, (list, dict)) for v in inputs.values()):
        return inputs
    return {k: (copy.deepcopy(v) if isinstance(v, (list, dict)) else v) for k, v in inputs.items()}


def _invoke(impl: _Callable, inputs: dict[str, Any]) -> Any:
    return impl.fn(**_own(inputs))


def _call(impl: _Callable, inputs: dict[str, Any], timing: CallTiming) -> Any:
    """An inline call, timed for the run's notices (see flowkit.engine.bound.slow_notices)."""
    start = time.perf_counter()
    try:
        return impl.fn(**_own(inputs))
    finally:
        timing.calls += 1
        timing.seconds += time.perf_counter() - start


def reaches_models(node: Node) -> bool:
    """Whether the node's function calls models through flowkit's settings (a Prompt Flow tool
    whose code calls ``promptflow.tools`` chat): the run then needs its settings."""
    return getattr(getattr(node.impl, "fn", None), "__flowkit_models__", None) is not None


def _run_parts(node: Node, ctx: RunContext) -> Binding:
    """What a run adds to a python node's key.

    The models a tool's chat calls reach change its result as an llm node's model does
    (flowkit.pfcompat.connections.models_reached): a connection parameter given a literal name
    reaches that connection; one given a reference (``${inputs.conn}``) may reach any, so every
    configured connection is in the key. The variables the run sets (``environment``, the CLI's
    ``--environment-variables``) are set precisely to change what code does: in every python
    node's key.
    """
    parts: dict[str, Any] = {}
    models = getattr(getattr(node.impl, "fn", None), "__flowkit_models__", None)
    if models is not None:
        literal = {param: value for param, ref, value in node.inputs if ref is None}
        dynamic = frozenset(param for param, ref, _ in node.inputs if ref is not None)
        parts["models"] = models(ctx.settings, literal, dynamic)
    environment = getattr(ctx, "environment", None)
    if environment:
        parts["environment"] = dict(sorted(environment.items()))
    return Binding(key_parts=parts) if parts else Binding()


@register
class PythonKind(Kind):
    name = "python"
    spec_model = PythonNode
    path_fields = ("source",)

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        return _compile_function(node, base_dir, ctx)

    def prepare(self, node: Node, ctx: RunContext) -> Binding:
        return _run_parts(node, ctx)

    def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        with collecting_calls(getattr(ctx, "settings", None)) as calls:
            output = _call(node.impl, inputs, node.timing)
        return NodeResult(output, llm=as_llm_meta(calls))

    async def run(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        impl: _Callable = node.impl
        with collecting_calls(getattr(ctx, "settings", None)) as calls:
            if impl.is_coroutine:
                output = await impl.fn(**_own(inputs))
            else:  # declared blocking: the run's threads
                loop = asyncio.get_running_loop()
                call = contextvars.copy_context().run
                output = await loop.run_in_executor(ctx.threads, call, _invoke, impl, inputs)
        return NodeResult(output, llm=as_llm_meta(calls))


@register
class AggregateKind(Kind):
    """Runs once after all rows, given per-row lists (flowkit.engine.aggregation)."""

    name = "aggregate"
    spec_model = AggregateNode
    path_fields = ("source",)

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        compiled = _compile_function(node, base_dir, ctx)
        return None if compiled is None else Compiled(compiled.impl, compiled.key_parts)

    def prepare(self, node: Node, ctx: RunContext) -> Binding:
        return _run_parts(node, ctx)  # a Prompt Flow aggregation tool may call a model

    def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        impl: _Callable = node.impl
        # Its model calls go to the run's model and session, as a python node's do.
        with collecting() as logged, collecting_calls(getattr(ctx, "settings", None)) as calls:
            # Aggregates run after the rows' event loop has closed, so a coroutine gets its own.
            output = asyncio.run(impl.fn(**inputs)) if impl.is_coroutine else impl.fn(**inputs)
        meta = as_llm_meta(calls)
        if node.spec.metrics == "logged":
            return NodeResult(dict(logged), llm=meta, extra={"returned": output})
        if not isinstance(output, dict):
            raise TypeError(
                f"aggregate function {node.spec.function} returned {type(output).__name__}, "
                "expected a dict of metric name → value"
            )
        return NodeResult(output, llm=meta)
