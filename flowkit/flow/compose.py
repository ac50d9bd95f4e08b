"""Several flows run as one (`flowkit run A B`): each becomes a sub-flow node of a composed flow,
their inputs joined by name."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from flowkit.code import freshness
from flowkit.errors import UsageError
from flowkit.flow.graph import Flow
from flowkit.flow.loader import LoadContext, _flow_path, _raise, without_paths
from flowkit.flow.source import YDict


def compose(flows: list[str | os.PathLike[str]], name: str = "suite") -> Flow:
    """Several flows as one: each becomes a sub-flow node, their inputs joined by name."""
    if not flows:
        raise UsageError("no flow given to run", hint="name one flow or more")
    ctx = LoadContext()
    paths = [_flow_path(f) for f in flows]
    with freshness.recording() as seen:  # the sub-flows' code (composing adds none)
        subs = [ctx.load(p) for p in paths]
    _raise(ctx, name)
    named: dict[str, Path] = {}
    for path, sub in zip(paths, subs, strict=True):
        assert sub is not None
        if sub.name in named:
            # Each flow's outputs and metrics are named by its flow name (an alias, as
            # ada_similarity, names the same flow).
            which = "" if named[sub.name] == path else f" ({named[sub.name]}, {path})"
            raise UsageError(
                f"the flow {sub.name!r} is given twice{which}; each flow's outputs and metrics "
                "go under its name, so give each flow once",
            )
        named[sub.name] = path
    inputs: dict[str, Any] = {}
    for sub in subs:
        assert sub is not None
        for key, spec in sub.inputs.items():
            if key not in inputs or (spec.required and not inputs[key].required):
                inputs[key] = spec
    # An optional input that the flows default differently (f1_score's threshold 0.5,
    # groundedness's 3) is not shared: one default would overrule the others, so each keeps its own.
    for key, spec in list(inputs.items()):
        specs = [s.inputs[key] for s in subs if s and key in s.inputs]
        if not spec.required and len({(o.type, repr(o.default)) for o in specs}) > 1:
            del inputs[key]
    nodes, outputs = [], {}
    for path, sub in zip(paths, subs, strict=True):
        assert sub is not None
        nodes.append(
            {
                "name": sub.name,
                "type": "flow",
                "flow": str(path),
                "inputs": {k: f"${{inputs.{k}}}" for k in sub.inputs if k in inputs},
            }
        )
        outputs[sub.name] = f"${{{sub.name}.output}}"
    raw = YDict(
        name=name,
        description="flows run together: " + ", ".join(s.name for s in subs if s),
        inputs={k: v.model_dump(exclude_unset=True) for k, v in inputs.items()},
        outputs=outputs,
        nodes=nodes,
    )
    raw.file, raw.line, raw.key_lines = name, 0, {}
    flow = ctx.build(raw, Path.cwd() / f"{name}.yaml", name)
    _raise(ctx, name)
    assert flow is not None
    return replace(
        without_paths(flow),
        sources=tuple(str(p) for p in paths),
        code_files=tuple(sorted(seen.items())),
    )
