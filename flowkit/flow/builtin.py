"""Finding flows: a path, or the name of a built-in flow shipped with flowkit.

The built-in flows live at the repo's top in flows/ and ship inside the wheel as
flowkit/builtin_flows (beside flowkit/prompts, so their `../prompts/` paths hold in both);
both places are searched so a source checkout and a plain `pip install` behave the same.
"""

from __future__ import annotations

import os
from pathlib import Path

from flowkit.errors import UsageError, did_you_mean


def builtin_dirs() -> list[Path]:
    package = Path(__file__).resolve().parent.parent
    return [d for d in (package / "builtin_flows", package.parent / "flows") if d.is_dir()]


BUILTIN_PREFIX = "flowkit:"
"""``use: flowkit:parse_score`` and ``flow: flowkit:groundedness`` name a built-in node or flow
from any project, wherever flowkit is installed."""


def builtin_nodes() -> dict[str, Path]:
    """Name → path of every built-in node file (flows/nodes/*.yaml)."""
    found: dict[str, Path] = {}
    for directory in builtin_dirs():
        for path in sorted((directory / "nodes").glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def builtin_flows() -> dict[str, Path]:
    """Name → path of every built-in flow (files directly in flows/, not nodes/)."""
    found: dict[str, Path] = {}
    for directory in builtin_dirs():
        for path in sorted(directory.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


ALIASES = {"ada_similarity": "embedding_similarity"}
"""Names users know a built-in flow by from other tools (Azure's metric names)."""


def resolve_flow_path(flow: str | os.PathLike[str]) -> Path:
    if isinstance(flow, str) and flow.startswith(BUILTIN_PREFIX):
        flow = flow[len(BUILTIN_PREFIX) :]
    path = Path(flow)
    if path.exists() or path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        return path
    flows = builtin_flows()
    name = ALIASES.get(str(flow), str(flow))
    if name in flows:
        return flows[name]
    raise UsageError(
        f"no flow file {str(flow)!r} and no built-in flow of that name"
        f"{did_you_mean(str(flow), flows)}",
        hint="give a path to a .yaml flow, or see `flowkit list` for the built-in flows",
    )
