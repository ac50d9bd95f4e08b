"""Prompt Flow's rules for reading `flow.dag.yaml`, from its source (promptflow-core's
contracts/flow.py): which keys it reads, how a reference names a flow input or a node's output,
and how a requirements line names a distribution."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

FLOW_KEYS = {"$schema", "name", "description", "inputs", "outputs", "nodes", "node_variants"}
FLOW_KEYS |= {"environment", "additional_includes", "tags", "id", "tools", "language"}
FLOW_KEYS |= {"environment_variables", "message_format"}
"""What Prompt Flow reads at the top of the file (its Flow contract and the SDK's schema); any
other key it ignores, and so does flowkit, with a note (a misspelt key is the usual cause)."""
NODE_KEYS = {"name", "type", "source", "inputs", "aggregation", "activate", "use_variants"}
NODE_KEYS |= {"provider", "connection", "api", "module", "comment", "description", "tool"}
NODE_KEYS |= {"enable_cache", "reduce"}
"""What Prompt Flow's Node contract reads; other keys (`variants:`, `outputs:`) it ignores."""
_WHOLE_REF = re.compile(r"^\$\{(?P<body>[^{}]*)\}$")


def input_ref(value: Any) -> Any:
    """`${flow.x}`: Prompt Flow reads the prefix `flow.` as `inputs.` (its older spelling)."""
    found = _WHOLE_REF.match(value) if isinstance(value, str) else None
    if found is None or not found["body"].startswith("flow."):
        return value
    return "${inputs." + found["body"][len("flow.") :] + "}"


def output_ref(value: Any) -> Any:
    """A flow output's reference as Prompt Flow resolves it: `${node.SECTION.x}` reads the
    node's output's `x` whatever SECTION says (`outputs`, `output`), `${node.SECTION}` the
    whole output; `${inputs.x}` and `${flow.x}` read the flow's input."""
    value = input_ref(value)
    found = _WHOLE_REF.match(value) if isinstance(value, str) else None
    if found is None or found["body"].startswith("inputs."):
        return value
    node, _, port = found["body"].partition(".")
    prop = port.partition(".")[2]
    return "${" + node + ".output" + (f".{prop}" if prop else "") + "}"


def aggregation(node: dict[str, Any]) -> bool:
    """`aggregation: true`, or `reduce: true`, the older spelling Prompt Flow still reads."""
    return node.get("aggregation") is True or node.get("reduce") is True


_REQUIREMENT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def distribution(line: str) -> str | None:
    """The distribution a requirements line names (`keyrings.alt==5.0.0` → keyrings.alt); None
    for blank lines, comments, pip options (`-r`, `--index-url`) and paths or URLs."""
    spec = line.split(" #", 1)[0].strip()
    if not spec or spec.startswith(("#", "-", ".", "/")) or "://" in spec.split("@", 1)[0]:
        return None
    found = _REQUIREMENT.match(spec)
    return found[0] if found else None


def missing_requirements(folder: Path, env: Any) -> str | None:
    """A notice naming what the flow's `python_requirements_txt` lists but is not installed
    (Prompt Flow's own packages are not needed); None when nothing is missing."""
    if not isinstance(env, dict) or not env.get("python_requirements_txt"):
        return None
    path = folder / str(env["python_requirements_txt"])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    missing = []
    for line in lines:
        package = distribution(line)
        if package is None or package.lower().startswith("promptflow"):
            continue
        try:
            importlib.metadata.distribution(package)  # names are normalised (PEP 503)
        except importlib.metadata.PackageNotFoundError:
            missing.append(package)
    if not missing:
        return None
    return (
        f"{path.name} lists packages that are not installed: {', '.join(missing)} "
        f"(pip install {' '.join(missing)}); promptflow lines are not needed"
    )
