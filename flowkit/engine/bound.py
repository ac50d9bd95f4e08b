"""A flow bound for one run: what the run decided about each node, beside the frozen node.

A loaded ``Flow`` is a value that any number of runs share (in threads, tasks or processes), so
nothing a run decides may be written into it. ``flowkit.engine.prepare.bind`` asks each node's
kind what this run makes of it (``Kind.prepare``: the model endpoint, the run-time part of the
cache key) and returns a ``BoundFlow``, which the run owns and the executor, the lookahead, the
aggregates, a resume and every scale-out worker read instead of the flow.

A ``BoundNode`` copies the node's fields the executor reads per row (name, spec, inputs…) rather
than reaching through to the node: this runs once per node per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.flow.graph import Flow, Node
from flowkit.flow.refs import Ref
from flowkit.flow.spec import FlowSpec, InputSpec

if TYPE_CHECKING:
    from flowkit.llm.endpoint import Endpoint

SLOW_CALL_SECONDS = 0.005
"""An inline (non-blocking) python function slower than this a call, on average over the run,
holds up every other row while it runs: the run's notices say so (see ``slow_notices``)."""


@dataclass(slots=True)
class CallTiming:
    """How long an inline function's calls took in this run: measured per run, never in the
    shared node, and only reported (a node's mode never changes during a run)."""

    calls: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True, eq=False)
class BoundNode:
    """One node as this run runs it."""

    node: Node
    """The frozen node it binds."""
    qual: str
    """Its qualified name in the flow tree (`suite.judge`), as traces and --refresh name it."""
    endpoint: Endpoint | None
    """The model endpoint the run resolved for it (llm, embedding); None for other kinds."""
    run_parts: Mapping[str, Any]
    """The run-time part of its cache key (the model), beside the node's load-time parts."""
    static_key: str
    """Its complete row-independent cache key for this run."""
    is_async: bool
    """Whether it awaits (a task, or a thread for a blocking function); fixed for the run."""
    sub: BoundFlow | None
    """A flow node's sub-flow, bound for this run too."""
    timing: CallTiming = field(default_factory=CallTiming)
    # Copies of the node's fields read per row (see the module docstring).
    name: str = ""
    kind: str = ""
    spec: Any = None
    impl: Any = None
    inputs: tuple[tuple[str, Ref | None, Any], ...] = ()
    when: tuple[tuple[Ref, bool, Any], ...] | None = None
    deps: frozenset[str] = frozenset()

    @property
    def is_aggregate(self) -> bool:
        return self.kind == "aggregate"

    def model_endpoint(self) -> Endpoint:
        """The endpoint this run bound for the node: only kinds that call one have it."""
        if self.endpoint is None:
            raise RuntimeError(f"node {self.qual!r} has no model endpoint bound for this run")
        return self.endpoint

    def refs(self) -> list[Ref]:
        return self.node.refs()


@dataclass(frozen=True, slots=True, eq=False)
class BoundFlow:
    """A flow (and its sub-flows) bound for one run. Compared by identity: the executor keeps
    one plan per bound (sub-)flow."""

    flow: Flow
    nodes: Mapping[str, BoundNode]

    @property
    def name(self) -> str:
        return self.flow.name

    @property
    def spec(self) -> FlowSpec:
        return self.flow.spec

    @property
    def path(self) -> Path:
        return self.flow.path

    @property
    def inputs(self) -> dict[str, InputSpec]:
        return self.flow.inputs

    @property
    def outputs(self) -> Mapping[str, Ref]:
        return self.flow.outputs

    @property
    def row_order(self) -> tuple[str, ...]:
        return self.flow.row_order

    @property
    def aggregate_order(self) -> tuple[str, ...]:
        return self.flow.aggregate_order

    @property
    def content_hash(self) -> str:
        return self.flow.content_hash

    @property
    def import_path(self) -> tuple[str, ...]:
        return self.flow.import_path

    @property
    def sources(self) -> tuple[str, ...]:
        return self.flow.sources

    @property
    def target(self) -> Any:
        return self.flow.target

    def walk(self) -> Iterator[BoundNode]:
        """Every bound node of the tree, parents before their sub-flows' nodes."""
        for node in self.nodes.values():
            yield node
            if node.sub is not None:
                yield from node.sub.walk()


def slow_notices(bound: BoundFlow) -> list[str]:
    """One notice per inline python node whose calls averaged over ``SLOW_CALL_SECONDS``, named
    as the user wrote it; flowkit's own nodes (the built-in flows', --target's) are left out,
    since no ``blocking: true`` of the user's reaches them."""
    notices = []
    for node, name in _own_nodes(bound):
        timing = node.timing
        if node.is_async or not timing.calls:
            continue
        mean = timing.seconds / timing.calls
        if mean > SLOW_CALL_SECONDS:
            notices.append(
                f"{name}: its function took {mean * 1000:.0f} ms a call on average "
                f"({timing.calls} calls), run inline, so no other row progressed meanwhile; "
                "if it waits on I/O (a network, a disk, a subprocess), declare `blocking: true` "
                "on the node to run it in a thread"
            )
    return notices


def _own_nodes(bound: BoundFlow, where: str = "") -> Iterator[tuple[BoundNode, str]]:
    """The nodes of the user's own flow files, each with the words that name it: ``node 'x'``
    (``node 'sub.x'`` in a sub-flow, as traces name it), and in a --target app flow
    ``node 'x' of app flow 'app' (app.yaml)``, not the ``target.x`` of the flow flowkit wraps
    it in."""
    from flowkit.flow.builtin import builtin_dirs
    from flowkit.flow.target import TARGET_NODE

    if _inside(bound.path, builtin_dirs()):
        return
    wrapper = bound.target is not None and not where
    for node in bound.nodes.values():
        if wrapper and node.name != TARGET_NODE:
            continue  # the judges and pickers --target adds around the app
        if node.sub is not None:
            app = wrapper and node.name == TARGET_NODE
            yield from _own_nodes(node.sub, _app_flow(node.sub) if app else where)
        elif where:
            yield node, f"node {node.qual.partition('.')[2]!r} of {where}"
        else:
            yield node, f"node {node.qual!r}"


def _app_flow(app: BoundFlow) -> str:
    path = app.path
    shown = path.relative_to(Path.cwd()) if _inside(path, [Path.cwd()]) else path
    return f"app flow {app.name!r} ({shown})"


def _inside(path: Path, dirs: list[Path]) -> bool:
    resolved = path.resolve()
    return any(resolved.is_relative_to(d.resolve()) for d in dirs)


def timings(bound: BoundFlow) -> dict[str, tuple[int, float]]:
    """The inline calls measured in this binding (qualified name → calls, seconds), for a
    scale-out worker to send back to the driver (``add_timings``)."""
    return {n.qual: (n.timing.calls, n.timing.seconds) for n in bound.walk() if n.timing.calls}


def add_timings(bound: BoundFlow, measured: Mapping[str, tuple[int, float]]) -> None:
    for node in bound.walk():
        if node.qual in measured:
            calls, seconds = measured[node.qual]
            node.timing.calls += calls
            node.timing.seconds += seconds
