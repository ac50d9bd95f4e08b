"""A flow's folder and `python_path` folders are on sys.path only while that flow loads or runs.

Flows that bring their own import folders (a tool's sibling modules, a stand-in package for
another tool's imports) must not leave them importable for the rest of the process, where they
could answer an import meant for something else. The folders are appended after what is
installed, so they never shadow it, and counted per holder, so runs that overlap in one process
share them. When the last holder leaves, the folders go, and so do the modules first imported
from them while they were there; a module that was loaded before stays loaded.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

_lock = threading.Lock()
_holders: dict[str, int] = {}
_before: dict[str, frozenset[str]] = {}
"""For each folder this module put on sys.path: the modules that were loaded before it."""


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
    with _lock:
        for folder in folders:
            if not _holders.get(folder) and folder not in sys.path:
                _before[folder] = frozenset(sys.modules)
                sys.path.append(folder)
            _holders[folder] = _holders.get(folder, 0) + 1
    try:
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
    for name, module in list(sys.modules.items()):
        if name not in before and _found_in(folder, name, getattr(module, "__file__", None)):
            del sys.modules[name]
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
