"""Before any row runs: bind the flow for this run. Each node's kind says what the run makes
of it (its model endpoint, the run-time part of its cache key); the result is the run's own
``BoundFlow`` (flowkit.engine.bound), and the loaded flow is left as it was. Shared by a local
run and by each scale-out worker, so both bind alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import MappingProxyType

from flowkit import kinds
from flowkit.engine.bound import BoundFlow, BoundNode
from flowkit.engine.context import RunContext
from flowkit.engine.plan import calls_endpoint
from flowkit.errors import UsageError
from flowkit.flow.graph import Flow, Node
from flowkit.flow.node_key import declared_env, static_key


def walk_nodes(flow: Flow, prefix: str = "") -> Iterator[tuple[Flow, Node, str]]:
    """Every node of the flow tree with its owning flow and qualified name (`parent.child`)."""
    for node in flow.nodes.values():
        yield flow, node, prefix + node.name
        if node.kind == "flow":
            yield from walk_nodes(node.impl, f"{prefix}{node.name}.")


def bind(flow: Flow, ctx: RunContext) -> BoundFlow:
    """The flow bound for the run ``ctx`` belongs to; every node that lacks an endpoint is
    reported together, before any row runs (UsageError)."""
    problems: list[str] = []
    bound = _bind(flow, ctx, "", problems)
    if problems:
        raise UsageError("\n".join(one_per_cause(problems)))
    # No warm-up of the model layer here: a rerun the cache serves whole never imports the
    # openai SDK (most of an llm run's start-up); the first request imports what it needs.
    return bound


def _bind(flow: Flow, ctx: RunContext, prefix: str, problems: list[str]) -> BoundFlow:
    nodes: dict[str, BoundNode] = {}
    for node in flow.nodes.values():
        qual = prefix + node.name
        sub = _bind(node.impl, ctx, qual + ".", problems) if node.kind == "flow" else None
        ctx.flow_name = flow.name
        try:
            binding = kinds.get(node.kind).prepare(node, ctx)
        except UsageError as err:
            problems.append(err.message)
            binding = kinds.Binding()
        except Exception as err:  # a kind's own bug: reported with the others, before any row
            problems.append(
                f"flow {flow.name!r} node {node.name!r}: node type {node.kind!r} failed: "
                f"{type(err).__name__}: {err}"
            )
            binding = kinds.Binding()
        # Declared environment variables are read again for each run: the function reads them
        # when it runs, not when the flow was loaded (a notebook may change them in between).
        run_parts = MappingProxyType({**binding.key_parts, **declared_env(node.spec)})
        nodes[node.name] = BoundNode(
            node,
            qual,
            binding.endpoint,
            run_parts,
            static_key(node, run_parts) if run_parts else node.static_key,
            node.is_async if binding.is_async is None else binding.is_async,
            sub,
            name=node.name,
            kind=node.kind,
            spec=node.spec,
            impl=node.impl,
            inputs=node.inputs,
            when=node.when,
            deps=node.deps,
        )
    return BoundFlow(flow, MappingProxyType(nodes))


_WHO = re.compile(r"^(flow '[^']*' node '[^']*') ", re.DOTALL)


def one_per_cause(problems: list[str]) -> list[str]:
    """One message per cause: nodes that lack the same thing (a missing API key for every
    judge) are named together in its first line, not told the same twice."""
    causes: dict[str, list[str]] = {}
    for problem in problems:
        m = _WHO.match(problem)
        who, cause = (m[1], problem[m.end() :]) if m else ("", problem)
        causes.setdefault(cause, [])
        if who not in causes[cause]:
            causes[cause].append(who)
    out = []
    for cause, whos in causes.items():
        first, sep, rest = f"{whos[0]} {cause}".lstrip().partition("\n")
        if len(whos) > 1:
            first += f" The same for {', '.join(whos[1:])}."
        out.append(first + sep + rest)
    return out


def needs_settings(flow: Flow) -> bool:
    from flowkit.kinds.python import reaches_models

    return any(
        calls_endpoint(node) or (node.kind in ("python", "aggregate") and reaches_models(node))
        for _, node, _ in walk_nodes(flow)
    )
