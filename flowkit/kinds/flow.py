"""`flow` nodes: a whole flow reused as one node, its inputs mapped, its outputs addressed as
`${node.output.name}`. The executor runs the sub-flow's nodes inside the row (see
``Executor._subflow``); here the sub-flow is loaded and its interface checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from flowkit.errors import did_you_mean, display, one_of
from flowkit.flow.builtin import BUILTIN_PREFIX, builtin_flows
from flowkit.flow.spec import LATENCY_OUTPUT, USAGE_OUTPUT, FlowNode
from flowkit.kinds import Compiled, Kind, register

if TYPE_CHECKING:
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext

MAX_NESTING = 32
"""Sub-flows within sub-flows: far deeper than any flow a person writes, far shallower than
the stack that loading and running them take."""


@register
class FlowKind(Kind):
    name = "flow"
    spec_model = FlowNode
    path_fields = ("flow",)

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        target = node.spec.flow
        builtin = target.removeprefix(BUILTIN_PREFIX)
        path = base_dir / target
        if (target != builtin or not path.exists()) and builtin in builtin_flows():
            path = builtin_flows()[builtin]
        if not path.exists():
            nearby = [p.name for p in base_dir.glob("*.yaml")] if base_dir.is_dir() else []
            ctx.error(
                node,
                f"sub-flow {target!r} not found: no file {display(path)} and no built-in flow "
                f"of that name{did_you_mean(target, [*nearby, *builtin_flows()])}",
                key="flow",
            )
            return None
        chain = ctx.chain
        if len(chain) >= MAX_NESTING:
            # Refused here, at the node that goes one level too deep: left to run out of stack,
            # the error would surface in whichever file was being parsed at that moment.
            shown = [display(p) for p in chain]
            if len(shown) > 4:
                shown = [*shown[:2], "…", *shown[-2:]]
            ctx.error(
                node,
                f"sub-flows nest more than {MAX_NESTING} levels deep "
                f"({' → '.join(shown)} → {target}); flatten some of them",
                key="flow",
            )
            return None
        before = len(ctx.diagnostics)
        sub = ctx.load(path)
        if sub is None:
            if len(ctx.diagnostics) == before:
                ctx.error(node, f"sub-flow {target!r} could not be loaded", key="flow")
            return None
        for name in node.spec.inputs:
            if name not in sub.inputs:
                ctx.error(
                    node,
                    f"input {name!r} is not an input of sub-flow {sub.name!r}"
                    f"{did_you_mean(name, sub.inputs)}; it has: {one_of(sub.inputs)}",
                    key="inputs",
                    sub=name,
                )
        missing = [n for n, s in sub.inputs.items() if s.required and n not in node.spec.inputs]
        if missing:
            ctx.error(
                node,
                f"sub-flow {sub.name!r} needs input(s) {', '.join(missing)}; map them "
                "under this node's inputs",
                key="inputs",
            )
        for flag, added in (("latency", LATENCY_OUTPUT), ("usage", USAGE_OUTPUT)):
            if getattr(node.spec, flag) and added in sub.outputs:
                ctx.error(
                    node,
                    f"sub-flow {sub.name!r} has an output {added!r} already, and "
                    f"`{flag}: true` would replace it; rename that output or drop `{flag}`",
                    key=flag,
                )
        # Whether it waits follows from the sub-flow's own nodes (executor._waits).
        return Compiled(sub, {"flow": sub.content_hash}, is_async=False)
