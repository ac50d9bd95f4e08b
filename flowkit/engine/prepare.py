"""Before any row runs: bind each node's run-time settings (its model endpoint) and fix its
static cache key. Shared by a local run and by each scale-out worker, so both prepare alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flowkit import kinds
from flowkit.engine.context import RunContext
from flowkit.engine.plan import ENDPOINT_KINDS
from flowkit.errors import UsageError
from flowkit.flow.graph import Flow
from flowkit.flow.loader import static_key


def walk_nodes(flow: Flow, prefix: str = "") -> Iterator[tuple[Flow, Any, str]]:
    """Every node of the flow tree with its owning flow and qualified name (`parent.child`)."""
    for node in flow.nodes.values():
        yield flow, node, prefix + node.name
        if node.kind == "flow":
            yield from walk_nodes(node.impl, f"{prefix}{node.name}.")


def prepare_nodes(flow: Flow, ctx: RunContext) -> None:
    """Bind model endpoints; report every node that lacks one together, before any row runs."""
    problems: list[str] = []
    for owner, node, _ in walk_nodes(flow):
        ctx.flow_name = owner.name
        try:
            kinds.get(node.kind).prepare(node, ctx)
        except UsageError as err:
            problems.append(err.message)
    if problems:
        unique = list(dict.fromkeys(problems))
        raise UsageError("\n".join(unique))
    for _, node, _ in walk_nodes(flow):
        node.static_key = static_key(node)
    if needs_settings(flow):
        from flowkit.llm.clients import warm_up  # the SDK, only once a run calls a model

        warm_up()  # the first request need not wait for the certificate store


def needs_settings(flow: Flow) -> bool:
    from flowkit.kinds.python import reaches_models

    return any(
        node.kind in ENDPOINT_KINDS or (node.kind == "python" and reaches_models(node))
        for _, node, _ in walk_nodes(flow)
    )
