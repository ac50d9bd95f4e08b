"""A flow's folder and `python_path` folders are on sys.path only while that flow loads or runs.

Flows that bring their own import folders (a tool's sibling modules, a stand-in package for
another tool's imports) must not leave them importable for the rest of the process, where they
could answer an import meant for something else. The folders are appended after what is
installed, so they never shadow it, and counted per holder, so runs that overlap in one process
share them. When the last holder leaves, the folders go, and so do the modules first imported
from them while they were there; a module that was loaded before stays loaded.

Two flows may each bring a module of the same name (their own ``helpers.py``). Entering a
flow's folders drops a loaded module of such a name that was found in another flow's folder,
so the flow imports (and fingerprints) its own. Flows loaded as one tree (composed, sub-flows,
a ``--target``) that reach two files under one name are refused at load
(``flowkit.code.imports.ModuleClaims``); separately loaded flows that run at the same moment in
one process and bring clashing names still share one (a limit: Python has one ``sys.modules``).
The folders held in the current context are :func:`active`: they are the project's roots for
the code fingerprint, and their modules load through ``flowkit.code.freshness``.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from flowkit.code.freshness import active, drop, in_a_project, watching
from flowkit.code.static import inspecting

_lock = threading.Lock()
_holders: dict[str, int] = {}
_before: dict[str, frozenset[str]] = {}
"""For each folder this module put on sys.path: the modules that were loaded before it."""
__all__ = ["active", "importable", "resolve"]


def resolve(folders: Iterable[str], base_dir: Path) -> tuple[str, ...]:
    """Absolute folders for a flow's `python_path` (``flowkit:DIR`` is a folder in flowkit)."""
    import flowkit

    found = []
    for folder in folders:
        if folder.startswith("flowkit:"):
            where = Path(flowkit.__file__).parent / folder.removeprefix("flowkit:")
        else:
            where = base_dir / folder
        found.append(str(where.resolve()))
    return tuple(dict.fromkeys(found))


@contextmanager
def importable(folders: Iterable[str]) -> Iterator[None]:
    """``folders`` on sys.path for the duration of the block."""
    folders = tuple(dict.fromkeys(folders))
    if not folders:
        yield
        return
    if inspecting():
        # Inspecting imports only flowkit and installed code, which look for optional modules
        # (``subprocess`` tries ``msvcrt``): with the flow's folder on sys.path, a module of
        # that name there would run. The folders are still the project's, for finding files.
        with watching(folders):
            yield
        return
    with _lock:
        _unshadow(folders)
        for folder in folders:
            if not _holders.get(folder) and folder not in sys.path:
                _before[folder] = frozenset(sys.modules)
                sys.path.append(folder)
            _holders[folder] = _holders.get(folder, 0) + 1
    try:
        with watching(folders):
            yield
    finally:
        with _lock:
            for folder in folders:
                _holders[folder] -= 1
                if _holders[folder] == 0:
                    del _holders[folder]
                    if folder in _before:
                        _leave(folder, _before.pop(folder))


def _leave(folder: str, before: frozenset[str]) -> None:
    if folder in sys.path:
        sys.path.remove(folder)
    drop(
        name
        # A copy made in one step: other threads (the threading backend's workers) import while
        # this runs, and iterating the live dict raises.
        for name, module in sys.modules.copy().items()
        if name not in before and _found_in(folder, name, getattr(module, "__file__", None))
    )
    sys.path_importer_cache.pop(folder, None)


def _found_in(folder: str, name: str, file: str | None) -> bool:
    """Whether an import statement found module ``name`` in ``folder`` (a module loaded from a
    file there by its path, under another name, is not bound to the folder being importable)."""
    if not file or not file.startswith(folder.rstrip(os.sep) + os.sep):
        return False
    parts = Path(file).relative_to(folder).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return list(parts) == name.split(".")


def _unshadow(folders: tuple[str, ...]) -> None:
    """Drop loaded top-level modules (and their submodules) that one of ``folders`` also
    defines but that were found in another flow's folder: an ``import`` must find the flow's
    own (flowkit.code.freshness finds it there first)."""
    loaded = {n for n in list(sys.modules) if "." not in n and not n.startswith("flowkit")}
    for folder in folders:
        try:
            entries = set(os.listdir(folder))
        except OSError:
            continue
        for name in sorted(loaded):
            if f"{name}.py" in entries:
                own = Path(folder, f"{name}.py")
            elif name in entries and Path(folder, name, "__init__.py").is_file():
                own = Path(folder, name, "__init__.py")
            else:
                continue
            loaded.discard(name)  # the first folder that defines it is where imports find it
            file = getattr(sys.modules.get(name), "__file__", None)
            if not file or not in_a_project(Path(file).resolve()):
                continue
            if Path(file).resolve() != own.resolve():
                drop([n for n in sys.modules if n == name or n.startswith(name + ".")])
