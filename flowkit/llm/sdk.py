"""The openai SDK, imported with the packages of its ``openai.types`` tree run on first use.

``import openai`` runs ``openai/types/__init__.py`` (and the SDK's client module reaches
``openai.types.responses`` and ``openai.types.chat`` through its helpers): some 470 modules and
hundreds of pydantic classes, about two thirds of the SDK's import time (0.6 s of 0.9 s
measured), none of which a chat request needs to go on the wire (flowkit builds bodies as plain
JSON and reads replies as plain JSON: ``prepared``). So while flowkit imports the SDK, each
*package* under ``openai.types`` is created with its ``__path__`` but without running its
``__init__``; the first attribute looked up on it that it lacks (``openai.types.ChatCompletion``,
``from openai.types.chat import completion_create_params``) is taken from the submodule the
``__init__`` imports it from, where the ``__init__``'s source says so plainly (``from .x import
Name``: all the SDK's type packages do), or else runs the ``__init__`` then, under a lock, and
from then on the package is as it would have been. Modules (not packages) load as always, so
whatever the SDK's client imports from one is there at once.

The package of the SDK's aiohttp transport is deferred the same way, so that the SDK's import
does not import aiohttp (``clients`` decides when it is needed); so is ``openai.lib``, whose
``__init__`` imports the SDK's structured-output parsing and with it the chat types (the SDK
takes only ``_client_auth``, ``azure`` and ``bedrock`` from it, modules that need neither), and
so is the http core under the SDK's httpx (``httpcore2``, or ``httpcore`` under older SDKs),
created here and run on first use: its ``__init__`` imports the blocking half of the library
too and reads its version from the installed distributions, where the first request needs
only its async connection pool, models and exceptions.

Nothing depends on the SDK's layout: a release that needs more of ``openai.types`` at import
time gets it at import time (the first look-up runs the ``__init__``), only slower. The SDK is
imported this way only when flowkit imports it first; a process that imported it already keeps
its module.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

CORES = ("httpcore2", "httpcore")
"""The http cores the SDK's httpx may sit on (newer SDKs' ``httpx2``, older ones' ``httpx``)."""

DEFERRED = "openai.types"
"""The SDK's tree whose packages' ``__init__`` runs on first use."""


class _DeferredInit(importlib.abc.Loader):
    """Loads a package as ``loader`` would, but runs its ``__init__`` at the first look-up of
    a name it lacks (PEP 562's module ``__getattr__``)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.reexports: dict[str, tuple[str, str]] | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        def __getattr__(name: str) -> Any:
            if module.__dict__.get("__getattr__") is __getattr__:
                if _submodule(module, name):
                    # ``from . import x`` in a module of the package, or ``package.x``: the
                    # submodule, as its import would give it. Running the ``__init__`` here
                    # instead would run it inside that module's import, which the
                    # ``__init__`` may import in turn, partly run (openai 2.31.0:
                    # ``types/responses/tool_param.py`` does ``from . import
                    # web_search_tool_param``, and ``responses/__init__`` imports
                    # ``ToolParam`` from it).
                    return importlib.import_module(f"{module.__name__}.{name}")
                found = self._reexported(module, name)
                if found is not None:
                    return found
                self._run_init(module, __getattr__)
            try:
                return module.__dict__[name]
            except KeyError:
                # While the __init__ runs, a name it has not defined yet is missing, as in any
                # package being imported (``from . import x`` then imports the submodule).
                raise AttributeError(
                    f"module {module.__name__!r} has no attribute {name!r}"
                ) from None

        module.__getattr__ = __getattr__  # type: ignore[method-assign]

    def _reexported(self, module: ModuleType, name: str) -> Any | None:
        """``name`` taken from the submodule the package's ``__init__`` imports it from
        (``from .chat_completion import ChatCompletion as ChatCompletion``, the whole of the
        SDK's type packages), without running the rest of the ``__init__``; None where the
        ``__init__`` binds it any other way, or its source is not to be had."""
        if self.reexports is None:
            self.reexports = _reexports(self.loader, module.__name__)
        where = self.reexports.get(name)
        if where is None:
            return None
        value = getattr(importlib.import_module(f"{module.__name__}.{where[0]}"), where[1])
        module.__dict__.setdefault(name, value)  # as the __init__ binds it, when it runs
        return value

    def _run_init(self, module: ModuleType, hook: Any) -> None:
        """Run the package's ``__init__`` once, as an import would: under the import system's
        lock for the module, marked initialising, so that another thread's ``import`` of it
        waits for the whole package (and the same thread's nested look-ups see it partial, as
        in any import)."""
        spec = module.__spec__
        with _module_lock(module.__name__):
            if module.__dict__.get("__getattr__") is not hook or getattr(
                spec, "_initializing", False
            ):
                return  # done by another thread meanwhile, or running in this one
            spec._initializing = True  # type: ignore[union-attr]
            try:
                self.loader.exec_module(module)
            finally:
                spec._initializing = False  # type: ignore[union-attr]
                if module.__dict__.get("__getattr__") is hook:
                    del module.__dict__["__getattr__"]


def _reexports(loader: Any, package: str) -> dict[str, tuple[str, str]]:
    """The names a package's ``__init__`` binds only by a top-level ``from .module import name``
    (name -> (module, its name there)): a name the ``__init__`` binds twice, or otherwise too
    (an assignment, a ``def``, an import inside an ``if``), is left out, and looking it up runs
    the ``__init__``; an ``__init__`` with a ``from … import *`` gives none. Read from the
    source: the SDK's type packages hold nothing else, and reading one costs less than a
    millisecond where running it costs tens."""
    try:
        source = loader.get_source(package)
        tree = ast.parse(source or "")
    except (ImportError, OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, tuple[str, str]] = {}
    other: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom) and statement.level == 1 and statement.module:
            for alias in statement.names:
                if alias.name == "*":
                    return {}  # it may bind any name: only running it tells
                bound = alias.asname or alias.name
                if bound in found:
                    other.add(bound)
                found[bound] = (statement.module, alias.name)
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                other.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                other.add(node.name)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                other.update((a.asname or a.name).partition(".")[0] for a in node.names)
    return {k: v for k, v in found.items() if k not in other}


def _submodule(package: ModuleType, name: str) -> bool:
    """Whether ``name`` is a module or package inside ``package``'s folder."""
    if name.startswith("__"):
        return False
    path = getattr(package, "__path__", None)
    try:
        found = importlib.machinery.PathFinder.find_spec(f"{package.__name__}.{name}", path)
    except (ImportError, ValueError):
        return False
    return found is not None


def _module_lock(name: str) -> Any:
    """The import system's lock for module ``name`` (what ``import`` holds while a module
    runs, with its detection of cross-thread cycles); a plain lock where it is not to be had."""
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)
    return manager(name) if manager is not None else _fallback_lock


_fallback_lock = threading.RLock()


class _DeferringFinder(importlib.abc.MetaPathFinder):
    def __init__(self, trees: tuple[str, ...]) -> None:
        self.trees = trees

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == t or fullname.startswith(t + ".") for t in self.trees):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            return spec  # a module, or something this finder does not know: as always
        spec.loader = _DeferredInit(spec.loader)
        return spec


_lock = threading.Lock()


@contextlib.contextmanager
def deferring(*trees: str) -> Iterator[None]:
    """Packages in ``trees`` (each tree's top included) first imported in the block run their
    ``__init__`` on first use (see the module's docstring)."""
    finder = _DeferringFinder(trees)
    with _lock:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with _lock:
            sys.meta_path.remove(finder)


def prefetch(name: str) -> threading.Thread | None:
    """Import ``name`` on a thread (None: imported already, or no thread to be had). Whoever
    imports it meanwhile waits for the module (the import system's lock for it); a failure here
    leaves it to that import, which then fails or succeeds as it would have."""

    def run() -> None:
        with contextlib.suppress(Exception):
            importlib.import_module(name)

    if name in sys.modules:
        return None
    try:
        thread = threading.Thread(target=run, name=f"flowkit-import-{name}", daemon=True)
        thread.start()
    except RuntimeError:  # no thread to be had (interpreter shutting down)
        return None
    return thread


# The SDK's aiohttp transport lives in a package (``openai._vendor.httpx_aiohttp``, or the
# ``httpx_aiohttp`` distribution before openai 2.32) whose ``__init__`` imports aiohttp; the SDK
# only needs its client class from it, a module that does not. So aiohttp (~0.2 s of imports and
# two loads of the certificate store) is imported when a client on that transport is built
# (``clients``), not with the SDK.
with deferring(DEFERRED, "openai.lib", "openai._vendor.httpx_aiohttp", "httpx_aiohttp", *CORES):
    import openai

    for _core in CORES:  # httpx imports its core when its first transport is built
        with contextlib.suppress(ImportError):
            importlib.import_module(_core)

__all__ = ["openai", "prefetch"]
