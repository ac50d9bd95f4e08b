"""A node's function read from its source text, never run: inspecting a flow (``validate``,
``describe``, ``convert``) must not execute it.

A user who clones a repository to look at its flows would otherwise run its code: importing a
module runs it. Within :func:`inspect_only`, :func:`~flowkit.code.fingerprint.load_from_folder`
reads the function's file with ``ast`` instead: whether the file and the function exist (the
same messages an import gives, with the same "did you mean"), and its parameters, so a node's
inputs are checked against them as before. Imports wait for a run.

What the source cannot say without running it is left to the run: a name bound by an
assignment or an import (``f = make_scorer()``, ``from x import f``) takes any inputs here. The
function's own module is never imported; flowkit's own functions and installed packages'
(``flowkit.metrics...:f``, ``package.module:f``) are imported as a run would: they are not the
flow's code.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import hashlib
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flowkit.code.imports import is_flowkit_or_installed, module_file
from flowkit.errors import did_you_mean, display

_inspecting: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "flowkit_inspect_only", default=False
)


@contextlib.contextmanager
def inspect_only() -> Iterator[None]:
    """Within: flows load without importing (so running) any of their own Python code."""
    token = _inspecting.set(True)
    try:
        yield
    finally:
        _inspecting.reset(token)


def inspecting() -> bool:
    """Whether flows load for inspection only (see :func:`inspect_only`)."""
    return _inspecting.get()


class NotRun(RuntimeError):
    """Raised by a function read for inspection if anything calls it."""


def user_file(module_name: str, project: tuple[Path, ...]) -> Path | None:
    """The user's file ``import module_name`` would run (None: flowkit's, an installed
    package's, or none at all)."""
    file = module_file(module_name, project)
    # Strictly where the interpreter installs: a folder of a cloned repository that is named
    # site-packages is still someone's code, never imported to be inspected.
    if file is None or file.suffix != ".py" or is_flowkit_or_installed(file.resolve()):
        return None
    return file


def read_function(path: Path, name: str, where: str) -> tuple[Callable[..., Any], str]:
    """(a stand-in with ``name``'s signature, a digest of the file) from ``path``'s source;
    ImportProblem (the import's own words) when the file or the name is not there."""
    from flowkit.code.fingerprint import ImportProblem

    try:
        text = path.read_bytes()
        tree = ast.parse(text, filename=str(path))
    except OSError as err:
        raise ImportProblem(f"importing {display(path)!r} failed: {err}") from None
    except SyntaxError as err:
        raise ImportProblem(
            f"importing {display(path)!r} failed: SyntaxError: {err.msg} (line {err.lineno})"
        ) from None
    digest = hashlib.sha256(text).hexdigest()
    head, _, rest = name.partition(".")
    found = _top_level(tree)
    node = found.get(head)
    if node is None:
        names = [n for n in found if not n.startswith("_")]
        raise ImportProblem(f"{where} has no function {name!r}{did_you_mean(head, names)}")
    if rest:  # a method or a nested name: only a run can say what it takes
        return _stand_in(None, name), digest
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return _stand_in(node, name), digest
    return _stand_in(None, name), digest


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    """Each name the module binds at its top level, by the statement that last binds it."""
    found: dict[str, ast.AST] = {}

    def bind(target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            found[target.id] = node
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                bind(element, node)

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    bind(target, node)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                bind(node.target, node)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    if alias.name != "*":
                        found[(alias.asname or alias.name).split(".")[0]] = node
            elif isinstance(node, ast.If | ast.Try):
                # Both ways of `if`/`try`: either may bind the name at import.
                walk(node.body)
                walk(node.orelse)
                for handler in getattr(node, "handlers", []):
                    walk(handler.body)
                walk(getattr(node, "finalbody", []))

    walk(tree.body)
    return found


_NO_DEFAULT = inspect.Parameter.empty


class _Unknown:
    """A default the source gives but only running it could compute."""

    def __repr__(self) -> str:
        return "…"


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> inspect.Signature:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[Any] = [_NO_DEFAULT] * (len(positional) - len(args.defaults))
    defaults += [_Unknown()] * len(args.defaults)
    kinds: list[inspect._ParameterKind] = [inspect.Parameter.POSITIONAL_ONLY] * len(
        args.posonlyargs
    )
    kinds += [inspect.Parameter.POSITIONAL_OR_KEYWORD] * len(args.args)
    params = [
        inspect.Parameter(a.arg, kind, default=d)
        for a, kind, d in zip(positional, kinds, defaults, strict=True)
    ]
    if args.vararg is not None:
        params.append(inspect.Parameter(args.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        default = _NO_DEFAULT if d is None else _Unknown()
        params.append(inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY, default=default))
    if args.kwarg is not None:
        params.append(inspect.Parameter(args.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(params)


def _stand_in(node: ast.FunctionDef | ast.AsyncFunctionDef | None, name: str) -> Any:
    """A callable with the function's name and signature (any inputs when unknown) that
    refuses to run: a flow loaded for inspection is never run."""

    def refuse() -> NotRun:
        return NotRun(f"{name} was read for inspection only; load the flow again to run it")

    async def refused_async(*args: Any, **kwargs: Any) -> Any:
        raise refuse()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise refuse()

    stand_in: Any = refused_async if isinstance(node, ast.AsyncFunctionDef) else refused
    stand_in.__name__ = stand_in.__qualname__ = name
    if node is not None:
        stand_in.__signature__ = _signature(node)
    return stand_in
