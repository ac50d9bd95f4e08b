"""The text each project module ran from, and whether the disk still says the same.

A notebook imports a flow's modules once and keeps them: edit ``helpers.py`` and the next run
would call the old functions while the fingerprint, read from disk, names the new ones, so the
old answers would be stored under the new code's key. Two rules close that:

- every module of the user's code flowkit imports while a flow loads or runs (from a flow's
  folder, its ``python_path`` folders, a ``--target``'s folder, but also a package installed
  editable or found on ``PYTHONPATH``: see flowkit.code.imports) is compiled from the bytes
  read here, never from ``__pycache__`` (a .pyc counts as fresh when the file's mtime in
  whole seconds and its size match, so an edit within a second would run the old code), and
  the digest of those bytes is kept: the fingerprint is of the very text that ran;
- before a function is imported, the user's modules its code reaches are compared with the
  disk: a module whose file changed since it ran, or that flowkit never saw run (imported by
  the user, perhaps before an edit), is dropped from ``sys.modules`` with the modules beside it
  in that reach, and so imported afresh. ``changed`` does the same comparison for a loaded
  flow's files, so a run of a flow loaded before an edit loads it again first.

flowkit's own modules are never dropped (their classes are shared with the running engine), nor
is ``__main__``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from flowkit.code.imports import is_installed, is_user_code

_lock = threading.Lock()
_ran: dict[str, tuple[str, str]] = {}
"""Resolved file path → (sha256 of the text a module was last executed from by flowkit, the
module's name)."""
_watched: dict[str, int] = {}
"""Project folders whose modules are compiled and recorded here (counted per holder)."""
_projects: set[Path] = set()
"""Every folder ever watched: a module found in one belongs to some flow's project."""
_seen: ContextVar[dict[str, str] | None] = ContextVar("flowkit_code_seen", default=None)
_active: ContextVar[tuple[str, ...]] = ContextVar("flowkit_import_path", default=())


def active() -> tuple[str, ...]:
    """The project folders of the blocks the caller is inside (:func:`watching`)."""
    return _active.get()


def ran_digest(path: Path) -> str | None:
    """The digest of the text the module at ``path`` was executed from, if flowkit ran it and
    it is still loaded (a module dropped since is read from the disk at its next import)."""
    digest, name = _ran.get(str(path), (None, ""))
    file = getattr(sys.modules.get(name), "__file__", None)
    return digest if file and _resolved(file) == path else None


def note_ran(path: Path, digest: str, name: str) -> None:
    """Module ``name`` was executed from the text of ``path`` whose sha256 is ``digest``."""
    _ran[str(path.resolve())] = (digest, name)


def record(path: Path, digest: str) -> None:
    """Note that the text ``digest`` of ``path`` entered a fingerprint (see :func:`recording`)."""
    seen = _seen.get()
    if seen is not None:
        seen[str(path)] = digest


@contextlib.contextmanager
def recording() -> Iterator[dict[str, str]]:
    """Collect every file (and the digest of its text) that enters a fingerprint in the block:
    a loaded flow keeps them, to tell at the next run whether it must load again."""
    seen: dict[str, str] = {}
    outer = _seen.get()
    token = _seen.set(seen)
    try:
        yield seen
    finally:
        _seen.reset(token)
        if outer is not None:
            outer.update(seen)


def disk_digest(path: Path) -> str | None:
    """The sha256 of the file's text now (re-read whenever its mtime, size or inode moved)."""
    try:
        st = path.stat()
        return _digest(str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return None


@functools.lru_cache(maxsize=4096)
def _digest(path: str, mtime_ns: int, size: int, inode: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def changed(files: Iterable[tuple[str, str]]) -> list[str]:
    """The files whose text on disk is no longer the digest recorded for them."""
    return [path for path, digest in files if disk_digest(Path(path)) != digest]


# -- compiling project modules from the bytes read ------------------------------------------


class _RecordingLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles from the text it reads and keeps that text's digest."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        data = self.get_data(path)
        note_ran(Path(path), hashlib.sha256(data).hexdigest(), fullname)
        return compile(data, path, "exec", dont_inherit=True)


class _ProjectFinder(importlib.abc.MetaPathFinder):
    """Finds modules as the path finder does, except that a top-level name the running flow's
    own folders define is found there rather than in another flow's folder earlier on the path
    (never rather than a module from anywhere else); those in a watched project folder load
    with the recording loader."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not _watched:
            return None
        find = importlib.machinery.PathFinder.find_spec
        spec = find(name, path, target)
        origin = getattr(spec, "origin", None)
        if path is None and _active.get() and origin and in_a_project(_real(origin)):
            own = find(name, list(_active.get()), target)
            spec = own if own is not None else spec
            origin = getattr(spec, "origin", None)
        if spec is None or not origin or not origin.endswith(".py"):
            return spec
        if not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        if name.split(".")[0] == "flowkit":
            return spec
        if _in_project(_real(origin)):
            spec.loader = _RecordingLoader(name, origin)
        return spec


_finder = _ProjectFinder()


def in_a_project(file: Path) -> bool:
    """Whether ``file`` lies in a folder some flow (or target) brought, not an installed one."""
    return not is_installed(file) and any(file.is_relative_to(p) for p in list(_projects))


def _real(origin: str) -> Path:
    """The resolved path of a module's file, its folder resolved once (every import while a
    flow loads or runs passes the finder: an SDK's hundreds of modules, each resolved whole,
    cost a one-row llm run about 0.01 s): a file that is no link lies where its folder
    resolves to."""
    if os.path.islink(origin):
        return _resolved(origin)
    folder, name = os.path.split(origin)
    return _resolved(folder) / name


def _in_project(file: Path) -> bool:
    """Whether a module imported while a flow loads or runs is recorded: any of the user's
    code (a package installed editable, or on PYTHONPATH, too), whose text keys the cache."""
    return is_user_code(file)


@contextlib.contextmanager
def watching(folders: Iterable[str]) -> Iterator[None]:
    """Modules imported from ``folders`` during the block are compiled and recorded here, and
    a top-level name they define is found in them first (they are :func:`active`)."""
    folders = tuple(str(Path(f).resolve()) for f in dict.fromkeys(folders))
    token = _active.set(tuple(dict.fromkeys((*_active.get(), *folders))))
    with _lock:
        if _finder not in sys.meta_path:
            at = next(
                (i for i, f in enumerate(sys.meta_path) if f is importlib.machinery.PathFinder),
                len(sys.meta_path),
            )
            sys.meta_path.insert(at, _finder)
        for folder in folders:
            _watched[folder] = _watched.get(folder, 0) + 1
            _projects.add(Path(folder))
    try:
        yield
    finally:
        _active.reset(token)
        with _lock:
            for folder in folders:
                _watched[folder] -= 1
                if not _watched[folder]:
                    del _watched[folder]


# -- dropping modules that no longer match their file ---------------------------------------


@functools.lru_cache(maxsize=8192)
def _resolved(file: str) -> Path:
    return Path(file).resolve()


def _modules_by_file() -> dict[Path, list[str]]:
    found: dict[Path, list[str]] = {}
    for name, module in sys.modules.copy().items():
        file = getattr(module, "__file__", None) if isinstance(module, ModuleType) else None
        if file and file.endswith(".py"):
            found.setdefault(_resolved(file), []).append(name)
    return found


def forget_stale(files: Iterable[Path]) -> list[str]:
    """Drop from ``sys.modules`` the modules of ``files`` (one function's reach) that are the
    user's code, when any of them changed on disk since it ran or ran unseen by flowkit; the
    names dropped. All of them go, not only the changed ones: a module that did
    ``from helpers import f`` holds the old ``f``. ``__main__`` (a script, a notebook) and
    modules without a file never go: nothing could import them again."""
    by_file = _modules_by_file()
    loaded: list[tuple[Path, list[str]]] = []
    stale = False
    for file in files:
        file = file.resolve()
        names = [n for n in by_file.get(file, ()) if _droppable(n)]
        if not names or not is_user_code(file):
            continue
        loaded.append((file, names))
        ran = ran_digest(file)
        stale = stale or ran is None or ran != disk_digest(file)
    if not stale:
        return []
    return drop([name for _, names in loaded for name in names])


def drop(names: Iterable[str]) -> list[str]:
    """Drop the modules ``names`` from ``sys.modules`` so that the next import reads their
    file again; the names dropped (more than asked, see below).

    A package keeps its submodules as attributes, and ``from pkg import mod`` takes the
    attribute when there is one: a package left holding a dropped module would hand out the
    old one. So every package of the user's code that holds a dropped module as an attribute
    lets go of it. A namespace package (a folder without ``__init__.py``) has no code of its
    own: it loses the attribute, and the next import sets it again. A regular package's
    ``__init__`` may have bound the name itself (``from . import mod``): it is dropped too.
    A package dropped takes its loaded submodules along, since a package imported again would
    lack the attributes of those left behind. ``__main__`` and flowkit's own never go."""
    gone: dict[str, ModuleType] = {}
    todo = [n for n in dict.fromkeys(names) if _droppable(n)]
    while todo:
        for name in todo:
            module = sys.modules.pop(name, None)
            if module is not None:
                gone[name] = module
        ids = {id(m) for m in gone.values()}
        # A package imported again would lack the attributes of submodules left loaded.
        todo = [n for n in list(sys.modules) if n.rpartition(".")[0] in gone]
        for name, module in sys.modules.copy().items():
            # Read from its dict: a module's own __getattr__ (a lazy loader) must not run here.
            if not isinstance(module, ModuleType) or "__path__" not in vars(module):
                continue
            held = [k for k, v in list(vars(module).items()) if id(v) in ids]
            if not held or not _droppable(name):
                continue
            file = vars(module).get("__file__")
            if not file:  # a namespace package
                for key in held:
                    with contextlib.suppress(AttributeError):
                        delattr(module, key)
            elif is_user_code(_resolved(file)):
                todo.append(name)
        todo = [n for n in dict.fromkeys(todo) if n not in gone and _reloadable(n)]
    importlib.invalidate_caches()
    return list(gone)


def _reloadable(name: str) -> bool:
    """Whether a module can be imported afresh: Python source or a namespace package (an
    extension module is initialised once per process)."""
    module = sys.modules.get(name)
    file = vars(module).get("__file__") if isinstance(module, ModuleType) else None
    return _droppable(name) and (not file or file.endswith(".py"))


def _droppable(name: str) -> bool:
    return name.split(".")[0] != "flowkit" and name not in ("__main__", "__mp_main__")
