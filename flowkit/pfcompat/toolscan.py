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
    value_types: dict[str, str] = field(default_factory=dict)
    """Per parameter, the Prompt Flow value type a literal node input is converted to (`int`,
    `double`, `bool`, `string`, `list`, `object`), read as Prompt Flow reads the signature."""


_VALUE_TYPES = {"int": "int", "float": "double", "bool": "bool", "str": "string", "list": "list"}


def _value_type(annotation: ast.expr | None, default: ast.expr | None, postponed: bool) -> str:
    """Prompt Flow's `param_to_definition` and `ValueType.from_type` on one parameter: the
    annotation (`Optional[X]` is X), else the default's type; anything else is `object`."""
    if annotation is None:
        if isinstance(default, ast.Constant) and default.value is not None:
            return _VALUE_TYPES.get(type(default.value).__name__, "object")
        return "list" if isinstance(default, ast.List) else "object"
    if postponed:  # `from __future__ import annotations`: the annotation is a string there
        return "object"
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) in (
        "Optional",
        "typing.Optional",
    ):
        annotation = annotation.slice
    elif isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        kept = [a for a in sides if not (isinstance(a, ast.Constant) and a.value is None)]
        annotation = kept[0] if len(kept) == 1 else annotation
    if isinstance(annotation, ast.Name):
        return _VALUE_TYPES.get(annotation.id, "object")
    return "object"


def _postponed(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )


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
    positional = [*fn.args.posonlyargs, *fn.args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(fn.args.defaults))
    pairs = [
        *zip(positional, [*defaults, *fn.args.defaults], strict=True),
        *zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True),
    ]
    postponed = _postponed(tree)
    types = {a.arg: _value_type(a.annotation, d, postponed) for a, d in pairs}
    return ToolInfo(fn.name, params, types)
