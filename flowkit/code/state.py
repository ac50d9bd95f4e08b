"""Fingerprints of what code holds rather than what a file says: a notebook's functions, the
cells of a closure, the plain data an object or its class carries.

A function defined in a notebook cell (module ``__main__``, or any module without a file) has
no file whose text could key it, and it calls what other cells defined. It is keyed by its own
source and, transitively, by everything it reaches by global name (its code's global loads and
imports, nested functions and comprehensions included):

- a ``__main__`` function or class: its source (a class: its methods and attributes), walked
  in turn;
- a function, class or module from a file: that file's fingerprint (the user's code by its
  text, an installed one by its version), as for a node's function;
- plain data (what canonical JSON carries): that JSON;
- a bound method (``svc.ask``, in a partial, a closure or a global): its function, and its
  object by the rule of an object: its class's code and its state (:func:`attributes`, each
  by this rule); an object of the user's own class the same way;
- anything else (a client, an open file, a model): it cannot be fingerprinted, and
  :class:`Unfingerprintable` says which name resisted, so the caller runs the code uncached
  with a notice rather than key it by less than it is.

The same rule keys a closure's cells and an object's (or its class's) attributes. A class is
keyed by its code and plain attributes, not by what a metaclass caches in it (``_abc_impl``)
nor by its ``__slots__`` descriptors (the values they give are its instances' state).
"""

from __future__ import annotations

import contextlib
import dis
import functools
import hashlib
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path, PurePath
from types import (
    CodeType,
    FunctionType,
    GetSetDescriptorType,
    MemberDescriptorType,
    MethodType,
    ModuleType,
    SimpleNamespace,
)
from typing import Any

from flowkit.cache.canonical import UnstorableValue, canonical_bytes
from flowkit.code.imports import is_user_code


class Unfingerprintable(Exception):
    """A value the key cannot hold; the message names it (``global 'client' of app cannot be
    fingerprinted (…)``)."""


def is_unfiled(obj: Any) -> bool:
    """Whether ``obj`` is a Python function or class with no file to key it by: defined in
    ``__main__`` (a notebook, a script's own functions) or in a module without a source file."""
    if not isinstance(obj, (FunctionType, type)):
        return False
    if getattr(obj, "__module__", None) == "__main__":
        return True
    try:
        file = inspect.getsourcefile(obj)
    except (TypeError, OSError):
        return isinstance(obj, FunctionType)  # a class of a built-in module is its version
    return not (file and Path(file).is_file())


class Walker:
    """Fingerprints values by the rule of the module docstring; ``filed`` keys a function,
    class or module that has a file, ``imported`` a name an ``import`` statement reaches."""

    def __init__(self, filed: Callable[[Any], str], imported: Callable[[str], str]) -> None:
        self._filed = filed
        self._imported = imported
        self._done: dict[int, Any] = {}

    def value(self, value: Any, what: str) -> Any:
        """A JSON-able stand-in for ``value`` that changes whenever it does."""
        if isinstance(value, functools.cached_property):  # a descriptor: its function's code
            return self.value(value.func, what)
        if isinstance(value, MethodType) and not inspect.isclass(value.__self__):
            # `svc.ask` reached through a partial, a closure or a global answers from its
            # object's state as much as from its code.
            return {
                "method": self.value(value.__func__, what),
                "self": self.instance(value.__self__),
            }
        if isinstance(value, ModuleType) or (
            (inspect.isroutine(value) or inspect.isclass(value)) and not is_unfiled(value)
        ):
            # What a factory's `make(k)` returned carries (the user's functions only: a
            # library's are its version).
            cells = closure(value) if _users(value) else {}
            return {
                "code": self._filed(value),
                **{n: self.value(c, f"closure variable {n!r}") for n, c in cells.items()},
            }
        if isinstance(value, FunctionType):
            return self.function(value)
        if isinstance(value, re.Pattern):
            return ["re", value.pattern, value.flags]
        if isinstance(value, PurePath):
            return ["path", str(value)]
        if type(value) is SimpleNamespace:
            return {k: self.value(v, f"{what} (attribute {k!r})") for k, v in vars(value).items()}
        if isinstance(value, type):
            return self.cls(value)
        if isinstance(value, functools.partial):
            return [
                self.value(value.func, what),
                self.data(value.args, what),
                self.data(value.keywords, what),
            ]
        if isinstance(value, (staticmethod, classmethod)):
            return self.value(value.__func__, what)
        if isinstance(value, property):
            return [self.value(f, what) for f in (value.fget, value.fset, value.fdel) if f]
        try:
            return self.data(value, what)
        except Unfingerprintable:
            if not _users(type(value)):
                raise
        # An object of the user's own class (`svc` in `lambda q: svc.ask(q)`, or in a partial):
        # the same rule as an object target.
        return self.instance(value)

    def instance(self, obj: Any) -> Any:
        """An object by its class's code and its state (:func:`attributes`), each attribute by
        the rule of :meth:`value`: what a bound method's object or an object target is."""
        if id(obj) in self._done:
            return self._done[id(obj)] or f"cycle:{type(obj).__qualname__}"
        self._done[id(obj)] = None
        what = f"the state of {type(obj).__name__}"
        parts = {
            "class": self.value(type(obj), type(obj).__qualname__),
            "state": {
                k: self.value(v, f"{what} (attribute {k!r})") for k, v in attributes(obj).items()
            },
        }
        digest = hashlib.sha256(canonical_bytes(parts)).hexdigest()
        self._done[id(obj)] = digest
        return digest

    def data(self, value: Any, what: str) -> Any:
        try:
            return hashlib.sha256(canonical_bytes(value)).hexdigest()
        except (TypeError, UnstorableValue, RecursionError) as err:
            why = str(err) if isinstance(err, UnstorableValue) else ""
            with contextlib.suppress(RecursionError):
                why = why or _not_json(value)
            why = why or f"a value of type {type(value).__name__} is not JSON"
            raise Unfingerprintable(f"{what} cannot be fingerprinted ({why})") from None

    def function(self, fn: FunctionType) -> Any:
        if id(fn) in self._done:  # recursion, or a helper two functions call
            return self._done[id(fn)] or f"cycle:{fn.__qualname__}"
        self._done[id(fn)] = None
        parts: list[Any] = [_source(fn)]
        for name in _global_names(fn.__code__):
            if name in fn.__globals__:
                what = f"global {name!r} of {fn.__qualname__}"
                parts.append([name, self.value(fn.__globals__[name], what)])
        for name in _imported_names(fn.__code__):
            parts.append(["import", name, self._imported(name)])
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
            try:
                contents = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
            what = f"closure variable {name!r} of {fn.__qualname__}"
            parts.append(["cell", name, self.value(contents, what)])
        digest = hashlib.sha256(canonical_bytes(parts)).hexdigest()
        self._done[id(fn)] = digest
        return digest

    def cls(self, cls: type) -> Any:
        if id(cls) in self._done:
            return self._done[id(cls)] or f"cycle:{cls.__qualname__}"
        self._done[id(cls)] = None
        parts: list[Any] = [cls.__qualname__]
        parts.extend(self.value(b, "a base class") for b in cls.__bases__ if b is not object)
        for name, attr in sorted(vars(cls).items()):
            if name.startswith("__") and name.endswith("__") and name != "__call__":
                continue
            if name in _MACHINERY or isinstance(attr, _SLOTS):
                continue  # a metaclass's cache; a slot, whose value the instance's state holds
            parts.append([name, self.value(attr, f"{cls.__name__}.{name}")])
        digest = hashlib.sha256(canonical_bytes(parts)).hexdigest()
        self._done[id(cls)] = digest
        return digest


def _not_json(value: Any) -> str:
    """Which part of a container is not plain data (the first found), in words."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"a key of type {type(key).__name__} is not JSON"
            if (inner := _not_json(item)) != "":
                return inner
        return ""
    if isinstance(value, (list, tuple)):
        return next((w for w in map(_not_json, value) if w), "")
    try:
        canonical_bytes(value)
    except (TypeError, UnstorableValue, RecursionError):
        return f"a value of type {type(value).__name__} is not JSON"
    return ""


def _source(fn: FunctionType) -> str:
    """The function's text (a notebook keeps each cell's in linecache), else its code's shape."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return _code_shape(fn.__code__)


def _code_shape(code: CodeType) -> str:
    consts = [_code_shape(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    shape = [code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_freevars]
    return hashlib.sha256(repr(shape).encode()).hexdigest()


def _codes(code: CodeType) -> list[CodeType]:
    """The code object and those nested in it (inner functions, lambdas, comprehensions)."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, CodeType):
            found.extend(_codes(const))
    return found


def _global_names(code: CodeType) -> list[str]:
    names = {
        ins.argval
        for c in _codes(code)
        for ins in dis.get_instructions(c)
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str)
    }
    return sorted(names)


def _imported_names(code: CodeType) -> list[str]:
    names = {
        ins.argval
        for c in _codes(code)
        for ins in dis.get_instructions(c)
        if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str)
    }
    return sorted(names)


def attributes(obj: Any) -> dict[str, Any]:
    """What an object carries: its own attributes (``__dict__`` and ``__slots__``), then the
    plain attributes of the user's classes along its MRO (set at import: ``class W: k = K``);
    methods, descriptors and dunders are its class's code, keyed with it, and a library's
    classes are keyed by its version."""
    state = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                state.setdefault(slot, getattr(obj, slot))
    for cls in type(obj).__mro__:
        if not _users(cls):  # a library's class attributes are its version's
            continue
        for name, attr in vars(cls).items():
            if (name.startswith("__") and name.endswith("__")) or name in _MACHINERY:
                continue
            if callable(attr) or hasattr(type(attr), "__get__"):
                continue
            state.setdefault(f"{cls.__qualname__}.{name}", attr)
    return state


_SLOTS = (MemberDescriptorType, GetSetDescriptorType)
"""A class's descriptors for ``__slots__`` (and ``__dict__``): the values live on instances."""
_MACHINERY = frozenset({"_abc_impl"})
"""Class attributes a metaclass sets (``abc.ABCMeta``'s cache), not the user's state."""


def _users(obj: Any) -> bool:
    """Whether a function or class is the user's code (not installed, not flowkit's)."""
    if is_unfiled(obj):
        return True
    code = getattr(obj, "__code__", None)
    if code is not None:
        file = code.co_filename
    else:
        file = getattr(sys.modules.get(getattr(obj, "__module__", "") or ""), "__file__", None)
    if not file and inspect.isclass(obj):
        # Its module left sys.modules (flowkit reloads edited user modules between runs, and
        # an object made before keeps the old class): its methods still name their file.
        for member in vars(obj).values():
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if code is not None:
                file = code.co_filename
                break
    return bool(file) and is_user_code(Path(file).resolve())


def closure(fn: Any) -> dict[str, Any]:
    """A function's closure cells by name (what ``make(k)`` returned carries)."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    found: dict[str, Any] = {}
    for name, cell in zip(getattr(code, "co_freevars", ()), cells, strict=False):
        try:
            found[name] = cell.cell_contents
        except ValueError:
            continue
    return found
