"""``flowkit.yaml``: its schema (:class:`ProjectFile`) and reading it, with every problem
reported at its ``file:line`` ("did you mean" for a misspelt key). ``config.load_settings``
merges what it holds with the environment and the command line."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.llm.config import PROJECT_FILE
from flowkit.llm.endpoint import Connection, Price


class ProjectFile(BaseModel):
    """The schema of ``flowkit.yaml``."""

    model_config = ConfigDict(extra="forbid")

    default_model: str | None = None
    """Model for llm nodes that do not pin one."""
    default_embedding_model: str | None = None
    """Model for embedding nodes that do not pin one."""
    default_connection: str | None = None
    """Connection for llm nodes that do not pin one."""
    connections: dict[str, Connection] = Field(default_factory=dict)
    """Named endpoints."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """USD per 1M tokens, extending the built-in estimate table."""
    batch_prices: dict[str, Price] = Field(default_factory=dict)
    """USD per 1M tokens sent through a batch API (default: half the price above)."""


def _describe(err: ValidationError, path: Path, text: str) -> str:
    """One line per problem, at its ``file:line``, with "did you mean" for a misspelt key.
    Pydantic's own text quotes the offending input, which may be a key; it is not shown."""
    from flowkit.flow.source import locate, parse_yaml

    try:
        root = parse_yaml(text, str(path))  # the same data, with the line of every key
    except Exception:
        root = None
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        line = locate(root, loc)[1] if root is not None else 0
        where = ".".join(str(p) for p in loc) or "(top level)"
        message = e["msg"]
        if e["type"] == "extra_forbidden" and loc:
            sections: dict[str, type[BaseModel]] = {
                "connections": Connection,
                "prices": Price,
                "batch_prices": Price,
            }
            model = sections.get(str(loc[0]), ProjectFile)
            known = model.model_fields if len(loc) > 1 else ProjectFile.model_fields
            message = f"unknown key {loc[-1]!r}{did_you_mean(str(loc[-1]), known)}"
            message += f"; known keys: {one_of(known)}"
        place = f"{path}:{line}" if line else str(path)
        lines.append(f"{place}: {where}: {message}")
    return "\n".join(lines)


def read_project_file(path: Path) -> ProjectFile:
    """Parse and validate ``flowkit.yaml``; every problem is a UsageError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise UsageError(
            f"{path}{where}: not valid YAML" + (f" ({problem})" if problem else "")
        ) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes().count(b"\n", 0, exc.start) + 1
        raise UsageError(
            f"{path}:{line}: not valid UTF-8 (byte {exc.start + 1})", hint="save the file as UTF-8"
        ) from None
    except RecursionError:
        raise UsageError(f"{path}: not valid YAML (nested too deeply)") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping at the top level")
    try:
        return ProjectFile.model_validate(raw)
    except ValidationError as exc:
        n = len(exc.errors())
        raise UsageError(
            f"{n} problem{'s' if n != 1 else ''} in {PROJECT_FILE}\n{_describe(exc, path, text)}"
        ) from None
