"""Node kinds: an extension point registered by a decorator.

A kind owns its node's schema and traits: the pydantic model a node's YAML is validated with
(``spec_model``), which of its fields name files relative to the flow file (``path_fields``),
and whether it calls a model endpoint (``calls_endpoint``). It knows how to compile a node at
load time (import its code, compile its prompt, report what is wrong), what a run makes of it
(its endpoint and model), and how to run it for one row. Its methods return values and never
write into the node: a loaded flow is frozen and shared by every run of it (see
flowkit.flow.graph and flowkit.engine.bound). The loader and the executor look kinds up here by
the node's `type`, so a kind registered with ``@register`` and nothing else is a node type like
the built-in ones. An installed package offers kinds to the CLI through the ``flowkit.kinds``
entry-point group (``ENTRY_POINTS``).

Besides the kinds: ``calls`` (model calls a python node's function makes through flowkit.llm),
``metric_log`` (``flowkit.log_metric``), ``app`` (what ``--target``'s node runs: the app's call,
its reply read, MLflow trace replies, its token usage observed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from flowkit.errors import UsageError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from flowkit.engine.bound import BoundNode
    from flowkit.engine.context import RunContext
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext
    from flowkit.flow.spec import NodeSpec
    from flowkit.llm.endpoint import Endpoint

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Compiled:
    """What a kind compiled of a node at load time; the loader builds the node with it."""

    impl: Any = None
    """A callable, a prompt template, a sub-flow: whatever ``run`` needs besides the spec."""
    key_parts: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """What else, known at load, changes the node's result (code, prompt): for its cache key."""
    is_async: bool = False
    """Whether running it awaits I/O (a task, or a thread for a blocking function)."""


@dataclass(frozen=True, slots=True)
class Binding:
    """What one run makes of a node (see flowkit.engine.bound.BoundNode)."""

    endpoint: Endpoint | None = None
    """The model endpoint the run's settings resolve for the node."""
    key_parts: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """What the run adds to the node's cache key (the model; never the server address)."""
    is_async: bool | None = None
    """Whether this run awaits the node; None keeps the compiled ``Compiled.is_async``."""


@dataclass(slots=True)
class NodeResult:
    """A node's output for one row, plus what the trace should know about producing it."""

    output: Any
    llm: dict[str, Any] | None = None
    """For model calls: model, messages, usage, finish_reason, attempts."""
    extra: dict[str, Any] = field(default_factory=dict)


class Kind:
    """Base class: a node kind's schema and traits, its load-time and run-time behaviour."""

    name: ClassVar[str]
    """The node's `type` in the flow file."""
    spec_model: ClassVar[type[NodeSpec]]
    """The node's schema: a subclass of flowkit.flow.spec.NodeSpec (extra keys forbidden)."""
    path_fields: ClassVar[tuple[str, ...]] = ()
    """Fields naming a file relative to the file they are written in (a `use:` node file's
    paths are made absolute before the merge). They stay out of the static cache key, since the
    same file may be reached by another path: the kind puts the file's content in
    ``key_parts``."""
    calls_endpoint: ClassVar[bool] = False
    """Whether running it calls a model endpoint: the run then loads the connection settings
    (``ctx.settings``) before ``prepare``, and bounds the rows in flight by the endpoints'."""

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        """What the node compiles to; None after reporting its problems to ``ctx``."""
        return Compiled()

    def prepare(self, node: Node, ctx: RunContext) -> Binding:
        """What a run (``ctx``) makes of the node before any row runs; raise UsageError."""
        return Binding()

    def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        """Run a node whose ``is_async`` is False, inline in the event loop's thread."""
        raise NotImplementedError

    async def run(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        """Run a node whose ``is_async`` is True; the executor makes it a task."""
        return self.run_sync(node, inputs, ctx)


KINDS: dict[str, Kind] = {}


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: make a node kind available under ``cls.name``."""
    from flowkit.flow.spec import NodeSpec  # pydantic, only once a kind is registered

    model = getattr(cls, "spec_model", None)
    if not (isinstance(model, type) and issubclass(model, NodeSpec)):
        raise TypeError(
            f"node kind {cls.__name__} needs spec_model, a subclass of flowkit.flow.spec.NodeSpec"
        )
    unknown = [f for f in cls.path_fields if f not in model.model_fields]
    if unknown:
        raise TypeError(f"node kind {cls.__name__}: path_fields {unknown} are not spec fields")
    builtin = _BUILTIN.get(cls.name)
    if builtin is not None and cls.__module__ != f"flowkit.kinds.{builtin}":
        # The built-in module, imported later by a flow that uses the type, would register
        # itself again over this one, in the middle of a run.
        raise TypeError(
            f"node kind {cls.__name__}: {cls.name!r} is a built-in node type; give the kind a "
            "name of its own"
        )
    held = KINDS.get(cls.name)
    if held is not None and type(held).__qualname__ != cls.__qualname__:
        raise TypeError(
            f"node kind {cls.__name__}: type {cls.name!r} is already registered by "
            f"{type(held).__module__}.{type(held).__qualname__}; give the kind a name of its own"
        )
    KINDS[cls.name] = cls()
    return cls


# The module of each built-in kind, imported on first use: not at the top, since the built-in
# kinds import the loader, and only the kinds a flow uses (the llm kind brings Jinja2 along).
# In the order messages list the node types.
_BUILTIN = {
    "python": "python",
    "llm": "llm",
    "embedding": "embedding",
    "aggregate": "python",
    "flow": "flow",
}


ENTRY_POINTS = "flowkit.kinds"
"""The entry-point group through which an installed package offers node kinds, so that the CLI
(which imports no user module) finds them: ``NAME = module`` (whose import registers ``NAME``)
or ``NAME = module:KindClass``."""


_seen: tuple[tuple[tuple[str, float], ...], list[EntryPoint]] | None = None


def _offered() -> list[EntryPoint]:
    """The installed packages' entry points in the group, read when a type is neither
    registered nor built in (an unknown type's message, a plugin's first use). Scanning every
    installed package costs ~20 ms, so the scan is kept while the import path and its folders'
    times are unchanged: an install (a new folder in site-packages) is seen at once."""
    global _seen
    import os
    import sys

    def mtime(folder: str) -> float:
        try:
            return os.stat(folder or ".").st_mtime
        except OSError:
            return -1.0

    state = tuple((folder, mtime(folder)) for folder in sys.path)
    if _seen is None or _seen[0] != state:
        from importlib.metadata import entry_points

        _seen = (state, list(entry_points(group=ENTRY_POINTS)))
    return _seen[1]


def names() -> list[str]:
    """Every node type a flow may use: the built-in ones, those registered, those offered."""
    known = [*_BUILTIN, *(name for name in KINDS if name not in _BUILTIN)]
    return [*known, *(ep.name for ep in _offered() if ep.name not in known)]


def find(kind: str) -> Kind | None:
    """The kind registered as ``kind``, imported on first use if it is built in or offered by
    an installed package; None if there is none."""
    if kind in KINDS:
        return KINDS[kind]
    if kind in _BUILTIN:
        import importlib

        importlib.import_module(f"flowkit.kinds.{_BUILTIN[kind]}")
        return KINDS[kind]
    for ep in _offered():
        if ep.name != kind:
            continue
        try:
            loaded = ep.load()
        except Exception as err:
            raise UsageError(
                f"node type {kind!r}: its package's entry point {ep.value!r} failed to import: "
                f"{type(err).__name__}: {err}"
            ) from err
        if isinstance(loaded, type) and issubclass(loaded, Kind) and kind not in KINDS:
            register(loaded)
        if kind not in KINDS:
            raise UsageError(
                f"node type {kind!r}: its package's entry point {ep.value!r} registered no kind "
                f"of that name"
            )
        return KINDS[kind]
    return None


def get(kind: str) -> Kind:
    """The kind registered as ``kind`` (see ``find``); KeyError if there is none."""
    found = find(kind)
    if found is None:
        raise KeyError(kind)
    return found
