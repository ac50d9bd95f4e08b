"""`use:` nodes: a node defined once in a file of its own, reused by many flows.

The node file holds a node without its name; ``use: flowkit:NAME`` names a built-in one
(flows/nodes/NAME.yaml, e.g. ``flowkit:parse_score``) from any project. Fields given in place
override the file's, and `inputs` are merged key by key. Paths inside the node file (the
fields its kind names in ``path_fields``: prompt, source, flow…) are relative to that file, so
they are made absolute before the merge.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.errors import did_you_mean, display, one_of
from flowkit.flow.builtin import BUILTIN_PREFIX, builtin_nodes
from flowkit.flow.source import YamlSyntaxError, YDict, is_file, line_of, read_yaml
from flowkit.flow.spec import usable_path

if TYPE_CHECKING:
    from flowkit.flow.loader import LoadContext


def path_fields(kind: Any) -> tuple[str, ...]:
    """The fields of a node of type ``kind`` that name a file relative to the file they are
    written in (none for an unknown type, which the schema reports)."""
    # Kinds are an extension point that imports this package: looked up, not imported at top.
    from flowkit import kinds

    found = kinds.find(kind) if isinstance(kind, str) else None
    return () if found is None else found.path_fields


def merge_use(
    ctx: LoadContext, raw: dict[str, Any], path: Path, file: str, name: str | None
) -> YDict | None:
    """The node ``raw`` with its `use:` file merged in, or None after reporting why not."""
    target = raw["use"]
    line = line_of(raw, "use")
    if not isinstance(target, str):
        ctx.report(file, line, name, "'use' takes the path of a node file")
        return None
    if target.startswith(BUILTIN_PREFIX):
        nodes = builtin_nodes()
        wanted = target[len(BUILTIN_PREFIX) :]
        if wanted not in nodes:
            ctx.report(
                file,
                line,
                name,
                f"use: no built-in node {wanted!r}{did_you_mean(wanted, nodes)}; the built-in "
                f"nodes are: {one_of(nodes)}",
            )
            return None
        used = nodes[wanted]
        builtin = True
    else:
        builtin = False
        try:
            used = (path.parent / usable_path(target)).resolve()
        except (OSError, ValueError) as err:
            ctx.report(file, line, name, f"use: {err}")
            return None
    try:
        base = read_yaml(used, display(used)) if is_file(used) else None
    except YamlSyntaxError as err:
        ctx.diagnostics.append(err.diagnostic)
        return None
    except UnicodeDecodeError as err:
        ctx.report(file, line, name, f"node file {target!r} is not UTF-8 text ({err.reason})")
        return None
    except OSError as err:
        ctx.report(file, line, name, f"cannot read node file {target!r}: {err.strerror}")
        return None
    if not isinstance(base, dict):
        problem = "does not exist" if base is None else "is not a mapping of node fields"
        ctx.report(file, line, name, f"node file {target!r} {problem}")
        return None
    merged = YDict()
    merged.file, merged.line, merged.key_lines = file, getattr(raw, "line", 0), {}
    paths = path_fields(raw.get("type", base.get("type")))
    for key, value in base.items():
        if key in paths and isinstance(value, str):
            # A path the OS would refuse stays as written, for the schema to report.
            with contextlib.suppress(OSError, ValueError):
                value = _rebased(used.parent / usable_path(value), path.parent, builtin)
        merged[key], merged.key_lines[key] = value, line
    for key, value in raw.items():
        if key == "use":
            continue
        if key == "inputs" and isinstance(value, dict) and isinstance(merged.get(key), dict):
            joined = YDict({**merged[key], **value})
            joined.file, joined.line = file, line_of(raw, key)
            joined.key_lines = {k: getattr(value, "key_lines", {}).get(k, line) for k in joined}
            value = joined
        merged[key], merged.key_lines[key] = value, line_of(raw, key)
    return merged


def _rebased(value: Path, folder: Path, builtin: bool) -> str:
    """A node file's path as the using flow's file names it: relative to ``folder``, so the
    flow's content (its hash) does not depend on where the project lies, and a worker that
    unpacks the flow elsewhere loads the same flow; a built-in node's stays absolute (its file
    is in flowkit's own folder)."""
    found = value.resolve()
    if builtin:
        return str(found)
    try:
        return os.path.relpath(found, folder.resolve())
    except ValueError:  # another drive (Windows)
        return str(found)
