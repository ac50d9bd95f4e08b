"""`flowkit convert`: a Prompt Flow folder written out as a native flowkit flow file.

The file is the very translation `flowkit run DIR` runs, so both give the same results; paths
in it are made relative to where the file is written. The flow's python files are left as they
are: they keep importing `promptflow`, which the flow's `python_path` provides.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from flowkit.code.static import inspect_only
from flowkit.errors import Diagnostic, UsageError, ValidationError
from flowkit.flow.formats import foreign_file
from flowkit.flow.loader import LoadContext, load_flow
from flowkit.flow.use import path_fields
from flowkit.pfcompat.dag import SHIM, translate


class _Dumper(yaml.SafeDumper):
    """Multi-line text (prompt templates) as readable literal blocks."""


def _text(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value and not any(c in value for c in "\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def convert_folder(source: Path, output: Path) -> Path:
    """Translate ``source`` and write it to ``output``; the written file is loaded back."""
    file = foreign_file(source.resolve())
    if file is None:
        raise UsageError(f"{source} holds no flow.dag.yaml", hint="give a Prompt Flow folder")
    ctx = LoadContext()
    raw = translate(file, ctx)
    if ctx.diagnostics or raw is None:
        raise ValidationError(ctx.diagnostics or [Diagnostic(str(file), 0, None, "not loaded")])
    flow = _plain(raw)
    out_dir = output.resolve().parent
    folder = file.parent

    def moved(path: str) -> str:
        return Path(os.path.relpath(folder / path, out_dir)).as_posix()

    for node in flow["nodes"]:
        for key in path_fields(node.get("type")):
            if isinstance(node.get(key), str):
                node[key] = moved(node[key])
    flow["python_path"] = [moved(p) if p != SHIM else p for p in flow["python_path"]]
    header = f"# Converted from {file} by `flowkit convert`.\n"
    text = yaml.dump(flow, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(header + text, encoding="utf-8")
    with inspect_only():  # what was written must load on its own; converting runs nothing
        load_flow(output)
    return output
