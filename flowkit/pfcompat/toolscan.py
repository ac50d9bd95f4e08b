"""Finding the `@tool` function of a Prompt Flow code file by reading it, not importing it.

A Prompt Flow python node names only a file; its function is the file's one function decorated
with `tool` (bare, called, or as `promptflow.tool`). Reading the syntax tree finds it at
translation time, so `flowkit convert` can write the function's name without running user code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

CONNECTION_TYPES = ("AzureOpenAIConnection", "OpenAIConnection", "CustomConnection")


@dataclass
class ToolInfo:
    """The tool function of one file: its name and which parameters take a connection."""

    name: str
    connection_params: set[str] = field(default_factory=set)


def _is_tool(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Name):
        return target.id == "tool"
    return isinstance(target, ast.Attribute) and target.attr == "tool"


def find_tool(path: Path) -> ToolInfo | str:
    """The file's tool function, or why there is not exactly one."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as err:
        return f"{path.name} line {err.lineno}: Python syntax error: {err.msg}"
    except OSError as err:
        return f"cannot read {path.name}: {err.strerror or err}"
    found = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(_is_tool(d) for d in n.decorator_list)
    ]
    if len(found) != 1:
        names = ", ".join(f.name for f in found)
        what = "no @tool function" if not found else f"{len(found)} @tool functions ({names})"
        return f"{path.name} has {what}; a python node's file must define exactly one"
    fn = found[0]
    params = {
        a.arg
        for a in [*fn.args.args, *fn.args.kwonlyargs]
        if a.annotation is not None
        and any(t in ast.unparse(a.annotation) for t in CONNECTION_TYPES)
    }
    return ToolInfo(fn.name, params)
