"""The Prompt Flow command-line habits `flowkit run` accepts, turned into flowkit's own options.

`pf run create` takes `--column-mapping a=${data.x} b=${run.outputs.y}` (one flag, many pairs),
`--connections node.deployment_name=…`, `--environment-variables k=v` and `-f run.yml`. Each is
translated here into flowkit's `--map`, `--model`/`--connection` and environment, so that the run
itself is an ordinary flowkit run (and `--resume` finishes it like any other).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flowkit.errors import UsageError, did_you_mean, one_of

_PAIR = re.compile(r"^[A-Za-z_][\w.]*=")
RUN_YAML_KEYS = {"flow", "data", "run", "column_mapping", "connections"}
RUN_YAML_KEYS |= {"environment_variables", "name", "display_name", "description", "tags"}
RUN_YAML_KEYS |= {"$schema", "properties", "variant", "resources", "identity", "runtime", "init"}


@dataclass
class Habits:
    """What the Prompt Flow-style options of one `flowkit run` amount to."""

    flows: list[str] = field(default_factory=list)
    data: str | None = None
    prior_run: str | None = None
    name: str | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    connections: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    connection: str | None = None
    warnings: list[str] = field(default_factory=list)


def is_pair(arg: str) -> bool:
    """Whether a positional argument is a NAME=VALUE pair that followed a many-pairs option."""
    return bool(_PAIR.match(arg)) and not Path(arg).exists()


def pairs(values: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{option} {item!r} must be NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def read_run_yaml(path: Path) -> Habits:
    """A Prompt Flow run YAML: paths in it are relative to the file, as in `pf run create -f`."""
    from flowkit.flow.source import YamlSyntaxError, parse_yaml

    try:
        # As a flow file is read: aliases that expand a billion-fold are refused, not expanded
        # (str() of one hung the run for ever).
        raw = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, YamlSyntaxError) as err:
        raise UsageError(f"cannot read run file {str(path)!r}: {err}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"run file {str(path)!r} must be a mapping (flow, data, column_mapping…)")
    for key in ("column_mapping", "connections"):
        if raw.get(key) is not None and not isinstance(raw[key], dict):
            raise UsageError(f"run file {str(path)!r}: {key} must be a mapping")
    env = raw.get("environment_variables")
    if env is not None and not isinstance(env, dict | str):
        raise UsageError(
            f"run file {str(path)!r}: environment_variables must be a mapping or a .env file"
        )
    unknown = sorted(set(raw) - RUN_YAML_KEYS)
    base = path.parent
    habits = Habits()
    if unknown:
        habits.warnings.append(f"{path.name}: ignored keys {', '.join(unknown)}")
    if raw.get("flow"):
        habits.flows.append(str(base / str(raw["flow"])))
    if raw.get("data"):
        habits.data = str(base / str(raw["data"]))
    if raw.get("run"):
        habits.prior_run = str(raw["run"])
    habits.name = raw.get("name")
    habits.mapping = {str(k): str(v) for k, v in (raw.get("column_mapping") or {}).items()}
    for node, settings in (raw.get("connections") or {}).items():
        if settings is not None and not isinstance(settings, dict):
            raise UsageError(f"run file {str(path)!r}: connections.{node} must be a mapping")
        for key, value in (settings or {}).items():
            habits.connections.append(f"{node}.{key}={value}")
    env = raw.get("environment_variables") or {}
    if isinstance(env, str):
        env = _dotenv(base / env)
    habits.environment = {str(k): str(v) for k, v in env.items()}
    return habits


def _dotenv(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.partition("=")
        if sep and not name.strip().startswith("#"):
            out[name.strip()] = value.strip().strip("'\"")
    return out


def model_overrides(connections: list[str]) -> tuple[str | None, str | None]:
    """`--connections node.deployment_name=X node.connection=Y` as flowkit's --model and
    --connection: flowkit picks one model and one connection per run, not one per node."""
    models: set[str] = set()
    conns: set[str] = set()
    for node_key, value in pairs(connections, "--connections").items():
        _, _, key = node_key.rpartition(".")
        if key in ("deployment_name", "model"):
            models.add(value)
        elif key == "connection":
            conns.add(value)
        else:
            raise UsageError(
                f"--connections {node_key}={value}: only connection, deployment_name and model "
                "can be set"
            )
    for what, found in (("model", models), ("connection", conns)):
        if len(found) > 1:
            raise UsageError(
                f"--connections sets different {what}s ({', '.join(sorted(found))}); flowkit "
                f"uses one {what} per run",
                hint=f"run once per {what}, or pin it with `{what}:` in a converted flow",
            )
    return next(iter(models), None), next(iter(conns), None)


def known_mapping(mapping: dict[str, str], inputs: Any) -> tuple[dict[str, str], list[str]]:
    """The column mapping without keys that are not flow inputs, which are only warned about."""
    kept = {k: v for k, v in mapping.items() if k in inputs and k != "line_number"}
    warnings = [
        f"--column-mapping {k}: not an input of the flow{did_you_mean(k, inputs)}; ignored "
        f"(inputs: {one_of(inputs)})"
        for k in mapping
        if k not in inputs and k != "line_number"
    ]
    return kept, warnings


def default_notices(flow: Any, columns: list[str], mapping: dict[str, str]) -> list[str]:
    """Inputs where Prompt Flow would use the declared default but flowkit reads the column."""
    out = []
    for name, spec in flow.inputs.items():
        if not spec.required and name in columns and name not in mapping:
            default = repr(spec.default)
            default = default if len(default) <= 40 else default[:39] + "…"
            out.append(
                f"input {name!r} reads the data's column {name!r}; Prompt Flow would use the "
                f"declared default {default} unless --column-mapping maps it"
            )
    return out


def apply_environment(env: dict[str, str]) -> None:
    os.environ.update(env)
