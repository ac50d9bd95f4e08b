"""Importing user functions and fingerprinting their code for the cache key.

The fingerprint covers the whole source file that defines the function, not just the function's
own lines (editing a helper in the same file must re-run the node too), and every project module
that file imports, transitively (see ``flowkit.code.imports`` for the rule), plus the version
of the function's package (flowkit's own for the built-in metrics). Functions without a readable
source fall back to their qualified name and their package's version.

A flow's folder is on the import path while the flow loads and runs, as a script's folder is
for Python: ``function: mymetrics:fn`` finds ``mymetrics.py`` beside the flow, and a ``source:``
file can ``import helpers`` from beside it. ``load_from_folder`` is the one entry point for
"a function from a file in a folder, importable and fingerprinted" (flows, and tools loaded
from a folder by other front ends).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from flowkit.cache.canonical import canonical_bytes
from flowkit.code import freshness
from flowkit.code.importpath import active, importable
from flowkit.code.imports import is_user_code, module_file, project_files, reach
from flowkit.code.state import Unfingerprintable, Walker, attributes, is_unfiled
from flowkit.code.static import inspecting, read_function, user_file
from flowkit.errors import did_you_mean, display

_UNNAMED = ("flowkit_user_", "__main__")
"""Module names no import statement uses (a flow's ``source:`` files), so no flow's can clash."""
_SOURCE_DIGEST = "__flowkit_source_digest__"
"""Set on modules loaded from a flow's `source:` file: the sha256 of the text that was run."""


class ImportProblem(Exception):
    """Why a node's function could not be loaded, in words a user can act on."""


MOVED_MODULES = {
    "flowkit.aggregate": "flowkit.metrics.aggregate",
    "flowkit.textmetrics": "flowkit.metrics.text",
    "flowkit.retrieval_metrics": "flowkit.metrics.retrieval",
    "flowkit.safety": "flowkit.metrics.safety",
    "flowkit.judges": "flowkit.metrics.judges",
    "flowkit.parse": "flowkit.metrics.scores",
    "flowkit.parse_forms": "flowkit.metrics.score_forms",
    "flowkit.adapters": "flowkit.metrics.adapters",
}
"""Where the public functions of early development versions' flat modules live now. Users' flows
say `function: flowkit.aggregate:score_summary`; those references keep resolving (deprecated:
docs/development.md names the new paths)."""


@dataclass(frozen=True, slots=True)
class LoadedFunction:
    """A user's function and the fingerprint of the code behind it."""

    fn: Callable[..., Any]
    fingerprint: str
    """Changes whenever the function's file, a project module it imports or its package's
    version does."""


def load_from_folder(folder: Path, function: str, source: str | None = None) -> LoadedFunction:
    """Load ``function`` (``module:callable``, or a name inside the file ``source``) with
    ``folder`` importable, and fingerprint it with ``folder`` as the project's root.

    The folder is importable while this loads and fingerprints; a flow keeps it importable
    while it runs (its ``import_path``), for functions that import lazily. The folders made
    importable around this call (the flow's ``python_path``) belong to the project too.

    Within :func:`flowkit.code.static.inspect_only`, the user's function is read from its
    source and nothing of it runs."""
    if inspecting():
        read = _read_statically(folder, function, source)
        if read is not None:
            return read
    with importable([str(folder.resolve())]):
        fn = load_function(function, source, folder)
        roots = (folder, *(Path(f) for f in active()))
        try:
            return LoadedFunction(fn, code_fingerprint(fn, roots=roots))
        except Unfingerprintable as err:
            raise ImportProblem(f"{function} cannot be keyed for the cache: {err}") from None


def _read_statically(folder: Path, function: str, source: str | None) -> LoadedFunction | None:
    """The user's function as its source says (flowkit.code.static); None for flowkit's own
    and installed packages' functions, which are imported as a run imports them."""
    if source is not None:
        path = folder / source
        if not path.is_file():
            raise ImportProblem(f"source file {display(path)!r} does not exist")
        fn, digest = read_function(path, function, display(path))
        return LoadedFunction(fn, digest)
    module_name, sep, attr = function.partition(":")
    if not sep or not module_name or not attr:
        return None  # the import's own message says how to write it
    module_name = MOVED_MODULES.get(module_name, module_name)
    project = _project(folder)
    file = user_file(module_name, project)
    if file is None:
        top = module_name.split(".")[0]
        if top != module_name and user_file(top, project) is not None:
            # Importing would run the user's package to find no such module in it.
            raise ImportProblem(
                f"cannot import module {module_name!r}: No module named {module_name!r}"
            )
        return None
    fn, digest = read_function(file, attr, module_name)
    return LoadedFunction(fn, digest)


def _project(base_dir: Path) -> tuple[Path, ...]:
    return tuple(dict.fromkeys([base_dir.resolve(), *(Path(f).resolve() for f in active())]))


def load_function(function: str, source: str | None, base_dir: Path) -> Callable[..., Any]:
    """Resolve `package.module:callable`, or `name` inside the file `source`.

    Project modules (under ``base_dir`` or a folder made importable around the call) that
    changed on disk since they ran are imported again (see flowkit.code.freshness)."""
    project = _project(base_dir)
    with freshness.watching(str(p) for p in project):
        if source is not None:
            path = base_dir / source
            if path.is_file():
                freshness.forget_stale(project_files(path, project))
            return _from_file(path, function)
        return _import(function, project)


def _import(function: str, project: tuple[Path, ...]) -> Callable[..., Any]:
    module_name, sep, attr = function.partition(":")
    if not sep or not module_name or not attr:
        raise ImportProblem(
            f"function {function!r} must be written 'package.module:callable' "
            "(or give 'source: file.py' and the function's name)"
        )
    module_name = MOVED_MODULES.get(module_name, module_name)
    try:
        module = importlib.import_module(module_name)
        file = getattr(module, "__file__", None)
        # flowkit's own are never reloaded (the engine shares them), nor is __main__ (a script
        # or a notebook: nothing could import it again).
        own = module_name.split(".")[0] == "flowkit" or module_name == "__main__"
        if file and not own and freshness.forget_stale(project_files(Path(file), project)):
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            raise ImportProblem(f"cannot import module {module_name!r}: {err}") from None
        raise ImportProblem(f"importing {module_name!r} failed: {_last_line(err)}") from None
    except Exception as err:  # a user module that raises on import
        raise ImportProblem(f"importing {module_name!r} failed: {_last_line(err)}") from None
    return _attr(module, attr, module_name)


def _from_file(path: Path, name: str) -> Callable[..., Any]:
    shown = display(path)
    if not path.is_file():
        raise ImportProblem(f"source file {shown!r} does not exist")
    module_name = "flowkit_user_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportProblem(f"cannot load {shown!r} as Python")
    module = importlib.util.module_from_spec(spec)
    # Registered so that worker processes (joblib backends) can unpickle its functions by name.
    sys.modules[module_name] = module
    try:
        # Compiled from the text read here, never from __pycache__: a .pyc counts as fresh when
        # the file's mtime (whole seconds) and size match, so an edit within the same second
        # would run the old code. The fingerprint is of these very bytes (see code_fingerprint).
        text = path.read_bytes()
        module.__dict__[_SOURCE_DIGEST] = hashlib.sha256(text).hexdigest()
        freshness.note_ran(path, module.__dict__[_SOURCE_DIGEST], module_name)
        exec(compile(text, str(path), "exec"), module.__dict__)
    except Exception as err:
        del sys.modules[module_name]
        raise ImportProblem(f"importing {shown!r} failed: {_last_line(err)}") from None
    return _attr(module, name, shown)


def _attr(module: Any, attr: str, where: str) -> Callable[..., Any]:
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(module) if not n.startswith("_")]
            raise ImportProblem(f"{where} has no function {attr!r}{did_you_mean(part, names)}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ImportProblem(f"{where}:{attr} is not callable")
    return obj


def _last_line(err: BaseException) -> str:
    lines = traceback.format_exception_only(type(err), err)
    return lines[-1].strip() if lines else repr(err)


def _package_version(module_name: str) -> str:
    top = sys.modules.get(module_name.split(".")[0])
    return str(getattr(top, "__version__", ""))


def _own_package(module_name: str) -> Path | None:
    """The folder of the function's top-level package (None for a top-level module)."""
    top = sys.modules.get(module_name.split(".")[0])
    file = getattr(top, "__file__", None)
    if file and Path(file).name == "__init__.py":
        return Path(file).parent
    return None


def code_fingerprint(fn: Callable[..., Any], roots: tuple[Path, ...] = ()) -> str:
    """A stable digest that changes whenever the code defining ``fn`` changes: its file, the
    user's modules that file imports (transitively: see flowkit.code.imports), and its
    package's version. A function or class with no file to key it by (``__main__``: a
    notebook's cells) is keyed by its source and what it reaches by global name
    (flowkit.code.state); :class:`~flowkit.code.state.Unfingerprintable` when that includes
    a value that cannot be."""
    target = inspect.unwrap(fn)
    if is_unfiled(target):
        return value_fingerprint(target, getattr(target, "__qualname__", "it"), roots)
    return _filed(target, roots)


def value_fingerprint(value: Any, what: str, roots: tuple[Path, ...] = ()) -> str:
    """A digest of what ``value`` is by the rule of flowkit.code.state: code by its text (a
    function's closure cells with it), plain data by its JSON; ``what`` names it in the
    :class:`~flowkit.code.state.Unfingerprintable` raised when it cannot be had."""
    walker = Walker(lambda v: _filed(v, roots), lambda name: _imported(name, roots))
    return hashlib.sha256(canonical_bytes(walker.value(value, what))).hexdigest()


def app_fingerprint(app: Any, roots: tuple[Path, ...] = ()) -> tuple[str | None, str]:
    """(the fingerprint of what ``app`` is, or None when it cannot be had, and what part
    resisted). A function is its code and its closure's cells (a ``__main__`` function, its
    source and what it reaches by global name: flowkit.code.state); a bound method, its
    function's code and its object's state; an object with ``__call__``, its class's code and
    its state (its attributes, and its class's plain attributes along the MRO); a
    ``functools.partial``, its function's and its arguments'."""
    try:
        if inspect.ismethod(app) and not inspect.isclass(app.__self__):
            parts = [
                value_fingerprint(app.__func__, app.__qualname__, roots),
                _state(app.__self__, roots),
            ]
        elif inspect.isroutine(app) or inspect.isclass(app) or isinstance(app, functools.partial):
            app = inspect.unwrap(app) if inspect.isfunction(app) else app  # decorators: its code
            return value_fingerprint(app, getattr(app, "__qualname__", "the app"), roots), ""
        else:
            parts = [
                value_fingerprint(type(app), type(app).__qualname__, roots),
                _state(app, roots),
            ]
    except Unfingerprintable as err:
        return None, str(err)
    return hashlib.sha256(canonical_bytes(parts)).hexdigest(), ""


def _state(obj: Any, roots: tuple[Path, ...]) -> str:
    what = f"the state of {type(obj).__name__}"
    values = attributes(obj)
    parts = {k: value_fingerprint(v, f"{what} (attribute {k!r})", roots) for k, v in values.items()}
    return hashlib.sha256(canonical_bytes(parts)).hexdigest()


def _filed(target: Any, roots: tuple[Path, ...]) -> str:
    if isinstance(target, ModuleType):
        return _module_fingerprint(target, roots)
    try:
        file = inspect.getsourcefile(target)
    except TypeError:
        file = None
    module_name = getattr(target, "__module__", None) or ""
    if file and Path(file).is_file():
        return _file_fingerprint(Path(file), module_name, roots)
    try:
        return hashlib.sha256(inspect.getsource(target).encode()).hexdigest()
    except (OSError, TypeError):
        version = _package_version(module_name)
        # Never its repr: it may hold an address, which no other process shares.
        name = getattr(target, "__qualname__", None) or type(target).__qualname__
        ident = f"{module_name}:{name}@{version}"
        return hashlib.sha256(ident.encode()).hexdigest()


def _file_fingerprint(path: Path, module_name: str, roots: tuple[Path, ...]) -> str:
    """The version of the module's package and the text of each file of the user's code it
    reaches (contents only, not paths: a project moved to another folder keeps its cache; the
    text of a module is the text it ran from, when flowkit ran it, else the disk's)."""
    module = sys.modules.get(module_name)
    pinned = getattr(module, _SOURCE_DIGEST, None)
    own = _own_package(module_name)
    named = module_name if module_name and not module_name.startswith(_UNNAMED) else None
    files = reach(path, (*roots, path.parent), own, named).files
    parts = [_package_version(module_name)]
    for i, dep in enumerate(files):
        if i == 0 and pinned and str(path) == getattr(module, "__file__", None):
            digest = pinned
        else:
            digest = freshness.ran_digest(dep) or freshness.disk_digest(dep) or ""
        freshness.record(dep, digest)
        parts.append(digest)
    return hashlib.sha256("\0".join(parts[:2] + sorted(parts[2:])).encode()).hexdigest()


def _module_fingerprint(module: ModuleType, roots: tuple[Path, ...]) -> str:
    """A module a notebook's function uses: its file's fingerprint when it is the user's code,
    else its name and its package's version."""
    file: str | None = getattr(module, "__file__", None)
    path = Path(file) if file and file.endswith(".py") else None
    if path is not None and path.is_file() and is_user_code(path.resolve()):
        return _file_fingerprint(path, module.__name__, roots)
    ident = f"{module.__name__}@{_package_version(module.__name__)}"
    return hashlib.sha256(ident.encode()).hexdigest()


def _imported(name: str, roots: tuple[Path, ...]) -> str:
    """What ``import name`` inside a notebook's function reaches, loaded or not."""
    if (module := sys.modules.get(name)) is not None:
        return _module_fingerprint(module, roots)
    file = module_file(name, tuple(r.resolve() for r in roots))
    if file is not None and file.suffix == ".py" and is_user_code(file.resolve()):
        return _file_fingerprint(file, name, roots)
    return name


def is_async_callable(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine to await: an ``async def`` function or method,
    an object whose class's ``__call__`` is ``async def``, or a ``functools.partial`` of one
    (``inspect.iscoroutinefunction`` says False for the last two)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return False
    return callable(fn) and inspect.iscoroutinefunction(type(fn).__call__)
