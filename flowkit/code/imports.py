"""The project files a function's code depends on: its own file and the modules it imports,
followed transitively, as long as they belong to the user's project (or to the function's own
package, flowkit's included).

The rule, so that a cache key changes when the code behind a result does:

- a file counts when it lies under one of the *roots* (the flow's folder and its
  ``python_path`` folders, wherever they are; a ``--target``'s folder; the folder of the
  function's own top-level module or package) or in the function's own package, and not inside
  an installed environment (site-packages, the interpreter's prefix): installed libraries are
  pinned by their version instead;
- imports are read from the source (``import a.b``, ``from a import b``, ``from . import c``,
  at any depth, inside functions too, and ``importlib.import_module("a.b")`` with a literal
  name), so a module imported lazily still counts;
- a name is looked up as the import will find it: a loaded module's file (and
  ``flowkit.code.freshness`` makes sure a loaded project module is the text on disk), else
  the roots in order;
- what the code reads at run time (data files, environment variables, the network) is not
  followed; a node declares environment variables with ``cache: {env: [...]}``.
"""

from __future__ import annotations

import hashlib
import re
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

# An import statement that begins a line, at any indent: `import a.b as c, d` or
# `from ..pkg import (x, y)` (parenthesised lists may span lines; a backslash continues one).
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]*(\((?:[^)#]|#[^\n]*)*\)|(?:[^\n\\]|\\\r?\n)*)"
    rb"|import[ \t]+((?:[^\n\\]|\\\r?\n)*))",
    re.MULTILINE,
)
_COMMENT = re.compile(rb"#[^\n]*")
_IMPORT_CALL = re.compile(rb"import_module\(\s*[\"']([\w.]+)[\"']")


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
    found.extend((m.group(1).decode("ascii", "replace"), 0) for m in _IMPORT_CALL.finditer(text))
    return tuple(found)


@lru_cache(maxsize=2048)
def file_digest(path: str, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def _environment_dirs() -> tuple[Path, ...]:
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        if where := sysconfig.get_paths().get(key):
            dirs.add(where)
    return tuple(Path(d).resolve() for d in dirs)


def is_installed(path: Path) -> bool:
    """Whether ``path`` (resolved) lies in an installed environment (pinned by versions)."""
    return any(path.is_relative_to(e) for e in _environment_dirs())


# Where an imported name was found, by (name, search folders): a flow's nodes share files and
# so ask for the same names again. Only finds are kept, so a module created later is still seen.
_found: dict[tuple[str, tuple[Path, ...]], Path] = {}


def _module_file(name: str, search: tuple[Path, ...]) -> Path | None:
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


def project_files(start: Path, roots: tuple[Path, ...], own: Path | None = None) -> list[Path]:
    """``start`` and every project file it imports, transitively, in a stable order.

    ``roots``: folders whose files belong to the project (and where top-level names that no
    loaded module answers are looked for); ``own``: the folder of the function's package, whose
    files count even inside an installed environment.
    """
    roots = tuple(r.resolve() for r in roots)
    own = own.resolve() if own is not None else None

    def belongs(path: Path) -> bool:
        if own is not None and path.is_relative_to(own):
            return True
        if is_installed(path):
            return False
        return any(path.is_relative_to(r) for r in roots)

    search = roots + ((own.parent,) if own is not None else ())
    seen: dict[Path, None] = {start.resolve(): None}
    todo = [start.resolve()]
    while todo:
        current = todo.pop()
        try:
            mtime = current.stat().st_mtime_ns
        except OSError:
            continue
        for name, level in _imports(str(current), mtime):
            found = _relative_file(current, name, level) if level else _module_file(name, search)
            if found is None or found.suffix != ".py":
                continue
            found = found.resolve()
            if found not in seen and belongs(found):
                seen[found] = None
                todo.append(found)
    first, *rest = seen
    return [first, *sorted(rest)]
