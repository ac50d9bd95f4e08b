"""The project files a function's code depends on: its own file and the modules it imports,
followed transitively, as long as they belong to the user's project (or to the function's own
package, flowkit's included).

The rule, so that a cache key changes when the code behind a result does:

- a module whose file lies in the standard library or in a site-packages (dist-packages)
  folder is installed: it is pinned by its distribution's version, not followed. flowkit's own
  modules count as installed too (keyed by flowkit's version), except inside the function's
  own package (a built-in flow's function follows flowkit's files, as it always did);
- every other module file the code reaches is the user's code, wherever it lies: the flow's
  folder, a ``python_path`` folder, a ``--target``'s folder, but also a package installed
  editable (``pip install -e``) or found through ``PYTHONPATH``. Its text is in the key;
- imports are read from the source (``import a.b``, ``from a import b``, ``from . import c``,
  at any depth, inside functions too, after a ``;``, and ``importlib.import_module("a.b")``,
  ``import_module(".b", __package__)`` or ``__import__("a")`` with a literal name), so a
  module imported lazily still counts;
- a name is looked up as the import will find it: a loaded module's file (and
  ``flowkit.code.freshness`` makes sure a loaded project module is the text on disk), else
  the roots in order, else the interpreter's finders (``sys.meta_path``, asked for the spec
  only: nothing is imported);
- each file reached is known by the module name it is imported under: a flow tree in which
  two files answer one name is refused at load (``ModuleClaims``), since one process holds
  one module of a name;
- what the code reads at run time (data files, environment variables, the network) is not
  followed; a node declares environment variables with ``cache: {env: [...]}``.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import site
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

from flowkit.errors import display

# An import statement that begins a line, at any indent: `import a.b as c, d` or
# `from ..pkg import (x, y)` (parenthesised lists may span lines; a backslash continues one).
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]*(\((?:[^)#]|#[^\n]*)*\)|(?:[^\n\\]|\\\r?\n)*)"
    rb"|import[ \t]+((?:[^\n\\]|\\\r?\n)*))",
    re.MULTILINE,
)
_COMMENT = re.compile(rb"#[^\n]*")
_IMPORT_CALL = re.compile(rb"(?:\bimport_module|\b__import__)\(\s*[\"'](\.*[\w.]+)[\"']")
_STATEMENT_AFTER_SEMICOLON = re.compile(rb";[ \t]*(?=(?:import|from)[ \t])")
"""``import json; import hb``: the statement after a ``;`` starts a line of its own."""


def _names(listing: bytes) -> list[str]:
    """`a.b as c, d` (or a parenthesised, commented, multi-line list) → ["a.b", "d"]."""
    listing = _COMMENT.sub(b"", listing.split(b";")[0] if b"(" not in listing else listing)
    listing = listing.replace(b"\\", b" ").strip().strip(b"()")
    names = (part.split()[0] for part in listing.split(b",") if part.split())
    return [n.decode("ascii", "replace") for n in names if n != b"*"]


@lru_cache(maxsize=2048)
def _imports(path: str, mtime_ns: int) -> tuple[tuple[str, int], ...]:
    """(module name, relative level) for each import statement of the file.

    Read with a pattern rather than a full parse: a project's whole import graph is scanned at
    every start, and parsing each file with ``ast`` cost ~15 ms a file. A line inside a string
    that looks like an import only adds a file to the fingerprint, never hides one."""
    try:
        text = Path(path).read_bytes()
    except OSError:
        return ()
    text = _STATEMENT_AFTER_SEMICOLON.sub(b"\n", text)
    found: list[tuple[str, int]] = []
    for match in _IMPORT.finditer(text):
        source, listing, plain = match.groups()
        if plain is not None:
            found.extend((name, 0) for name in _names(plain))
            continue
        dotted = source.decode("ascii", "replace")
        base = dotted.lstrip(".")
        level = len(dotted) - len(base)
        found.append((base, level))
        # `from pkg import name`: name may be a submodule.
        found.extend((f"{base}.{n}" if base else n, level) for n in _names(listing))
    for call in _IMPORT_CALL.finditer(text):
        dotted = call.group(1).decode("ascii", "replace")
        base = dotted.lstrip(".")
        found.append((base, len(dotted) - len(base)))  # ".b" with __package__: relative
    return tuple(found)


@lru_cache(maxsize=2048)
def file_digest(path: str, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def _installed_dirs() -> tuple[Path, ...]:
    """The standard library's folders and every site-packages folder the interpreter knows."""
    paths = sysconfig.get_paths()
    dirs = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    with contextlib.suppress(AttributeError):  # some embedded interpreters lack them
        dirs.extend(site.getsitepackages())
    with contextlib.suppress(AttributeError):
        dirs.append(site.getusersitepackages())
    return tuple(Path(d).resolve() for d in dict.fromkeys(d for d in dirs if d))


_FLOWKIT = Path(__file__).resolve().parents[1]
"""flowkit's own package: pinned by flowkit's version wherever it lies (a checkout too)."""


def is_installed(path: Path) -> bool:
    """Whether ``path`` (resolved) is an installed module's: in the standard library or a
    site-packages (dist-packages) folder, pinned by its distribution's version."""
    if any(part in ("site-packages", "dist-packages") for part in path.parts):
        return True
    return any(path.is_relative_to(e) for e in _installed_dirs())


def is_flowkit_or_installed(path: Path) -> bool:
    """Whether ``path`` (resolved) lies in flowkit or a folder the interpreter installs into
    (not merely one that is named ``site-packages``: a cloned repository can have one)."""
    return path.is_relative_to(_FLOWKIT) or any(path.is_relative_to(e) for e in _installed_dirs())


def is_user_code(path: Path) -> bool:
    """Whether ``path`` (resolved) is the user's code, keyed by its text: neither installed nor
    flowkit's own."""
    return not is_installed(path) and not path.is_relative_to(_FLOWKIT)


# Where an imported name was found, by (name, search folders): a flow's nodes share files and
# so ask for the same names again. Only finds are kept, so a module created later is still seen.
_found: dict[tuple[str, tuple[Path, ...]], Path] = {}


def module_file(name: str, search: tuple[Path, ...]) -> Path | None:
    """The file ``import name`` finds: a loaded module's, else in ``search``, else where the
    interpreter's finders would load it from."""
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None) if module is not None else None
    if file:
        return Path(file)
    if (known := _found.get((name, search))) is not None:
        return known
    parent = sys.modules.get(name.rpartition(".")[0])
    if parent is not None and not hasattr(parent, "__path__"):
        return None  # `from module import name`: a module that is no package has no submodules
    parts = name.split(".")
    for base in search:
        for candidate in (
            base.joinpath(*parts).with_suffix(".py"),
            base.joinpath(*parts, "__init__.py"),
        ):
            if candidate.is_file():
                _found[(name, search)] = candidate
                return candidate
    spec = _spec(name)
    origin = getattr(spec, "origin", None)
    if spec is None or not origin or not getattr(spec, "has_location", False):
        return None
    _found[(name, search)] = Path(origin)
    return Path(origin)


def _spec(name: str) -> ModuleSpec | None:
    """Where the interpreter's finders would import ``name`` from (an editable install's
    finder, a ``PYTHONPATH`` folder …), without importing it or its packages."""
    path = None
    parent = name.rpartition(".")[0]
    if parent:
        module = sys.modules.get(parent)
        if module is not None:
            path = getattr(module, "__path__", None)
        else:
            found = _spec(parent)
            path = found.submodule_search_locations if found is not None else None
        if path is None:
            return None
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path, None)
        except Exception:  # a finder that cannot answer this name is no answer
            continue
        if spec is not None:
            return spec
    return None


def _relative_file(origin: Path, name: str, level: int) -> Path | None:
    base = origin.parent
    for _ in range(level - 1):
        base = base.parent
    parts = [p for p in name.split(".") if p]
    if not parts:
        init = base / "__init__.py"
        return init if init.is_file() else None
    for candidate in (
        base.joinpath(*parts).with_suffix(".py"),
        base.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


def _relative_name(origin: Path, origin_name: str | None, name: str, level: int) -> str | None:
    """The absolute name ``from {'.' * level}{name} import …`` in module ``origin_name`` means."""
    if origin_name is None:
        return None
    package = origin_name if origin.name == "__init__.py" else origin_name.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    if not package:
        return None
    return f"{package}.{name}" if name else package


@dataclass(frozen=True, slots=True)
class Reach:
    """What a function's code reaches: its files in a stable order (the start first), and the
    module name each of them is imported under (when it is known)."""

    files: tuple[Path, ...]
    names: tuple[tuple[str, Path], ...]


def reach(
    start: Path, roots: tuple[Path, ...], own: Path | None = None, start_name: str | None = None
) -> Reach:
    """``start`` (the module ``start_name``, if it is imported under a name) and every file of
    the user's code it imports, transitively; see the module docstring for the rule.

    ``roots``: folders where top-level names that no loaded module answers are looked for
    first (the flow's folder and ``python_path``); ``own``: the folder of the function's
    package, whose files count even when installed (flowkit's, for the built-in flows)."""
    roots = tuple(r.resolve() for r in roots)
    own = own.resolve() if own is not None else None

    def belongs(path: Path) -> bool:
        return (own is not None and path.is_relative_to(own)) or is_user_code(path)

    search = roots + ((own.parent,) if own is not None else ())
    first = start.resolve()
    seen: dict[Path, None] = {first: None}
    names: dict[tuple[str, Path], None] = {}
    known: dict[Path, str] = {}
    if start_name is not None:
        names[(start_name, first)] = None
        known[first] = start_name
    todo = [first]
    while todo:
        current = todo.pop()
        try:
            mtime = current.stat().st_mtime_ns
        except OSError:
            continue
        # flowkit's own modules import only flowkit's, the standard library's and installed
        # ones, which resolve alike wherever a flow lies: resolved once per file and version of
        # it (the built-in flows' nodes reach the same files again and again).
        memo_key = (current, mtime, known.get(current), search, own)
        children = _flowkit_children.get(memo_key) if current.is_relative_to(_FLOWKIT) else None
        if children is None:
            children = _children(current, mtime, known.get(current), search, belongs)
            if current.is_relative_to(_FLOWKIT):
                _flowkit_children[memo_key] = children
        for full, found in children:
            if full is not None:
                names[(full, found)] = None
                known.setdefault(found, full)
            if found not in seen:
                seen[found] = None
                todo.append(found)
    rest = sorted(p for p in seen if p != first)
    _note_names(names)
    return Reach((first, *rest), tuple(names))


_flowkit_children: dict[tuple[Any, ...], list[tuple[str | None, Path]]] = {}


def _children(
    current: Path,
    mtime: int,
    name: str | None,
    search: tuple[Path, ...],
    belongs: Callable[[Path], bool],
) -> list[tuple[str | None, Path]]:
    """The files of the user's code (``belongs``) that ``current`` imports, with the module
    name each is imported under when it is known."""
    out: list[tuple[str | None, Path]] = []
    for imported, level in _imports(str(current), mtime):
        if level:
            found = _relative_file(current, imported, level)
            full = _relative_name(current, name, imported, level)
        else:
            found, full = module_file(imported, search), imported
        if found is None or found.suffix != ".py":
            continue
        found = found.resolve()
        if belongs(found):
            out.append((full, found))
    return out


def project_files(start: Path, roots: tuple[Path, ...], own: Path | None = None) -> list[Path]:
    """``start`` and every file of the user's code it imports, transitively, in a stable order
    (see :func:`reach`)."""
    return list(reach(start, roots, own).files)


# -- one module name, one file, in a loaded flow tree ----------------------------------------

_reached: ContextVar[dict[str, set[Path]] | None] = ContextVar("flowkit_reached", default=None)


def _note_names(names: dict[tuple[str, Path], None]) -> None:
    seen = _reached.get()
    if seen is not None:
        for name, file in names:
            seen.setdefault(name, set()).add(file)


@contextlib.contextmanager
def recording_names() -> Iterator[dict[str, set[Path]]]:
    """The module names (and their files) of the user's code that fingerprints reach in the
    block (a block inside keeps its own)."""
    seen: dict[str, set[Path]] = {}
    token = _reached.set(seen)
    try:
        yield seen
    finally:
        _reached.reset(token)


class ModuleClaims:
    """Which file each module name is, across one loaded flow tree (its sub-flows, the flows
    composed with it, a ``--target``), and who reached it first.

    Python keeps one module of a name per process: a flow tree whose parts reach two files
    under one name runs one part with the other's module (at the first import inside a
    function), so it is refused rather than run."""

    def __init__(self) -> None:
        self._by_name: dict[str, tuple[Path, str]] = {}

    def claim(self, reached: dict[str, set[Path]], who: str) -> list[str]:
        """Note what ``who`` (``node 'x' (f.yaml:7)``) reached; a message for each clash.

        Two copies of one text (Prompt Flow folders that each carry the same ``utils.py``) are
        no clash: either copy runs the same code. (A copy that reads files beside itself
        through ``__file__`` would read the first copy's; that is what the cache key, keyed
        by the text, assumes anyway.)"""
        problems = []
        for name in sorted(reached):
            for file in sorted(reached[name]):
                first = self._by_name.setdefault(name, (file, who))
                if first[0] != file and not _same_text(first[0], file):
                    problems.append(_clash(name, file, *first))
        return problems


def _same_text(one: Path, other: Path) -> bool:
    try:
        return one.read_bytes() == other.read_bytes()
    except OSError:
        return False


def _clash(name: str, file: Path, other: Path, who: str) -> str:
    package, _, last = name.rpartition(".")
    return (
        f"module {name!r} is {display(file)} here but {display(other)} for {who}; one process "
        "holds one module of a name, so one of them would run the other's code: rename one of "
        "them, or move each into a package of a name of its own (a folder with an "
        f"__init__.py: from mypackage{'.' + package if package else ''} import {last})"
    )
