"""Node kinds: an extension point registered by a decorator.

A kind knows how to compile a node at load time (import its code, compile its prompt, report
what is wrong), what a run makes of it (its endpoint and model), and how to run it for one row.
Its methods return values and never write into the node: a loaded flow is frozen and shared by
every run of it (see flowkit.flow.graph and flowkit.engine.bound). The loader and the executor
look kinds up here by the node's `type`, so adding a kind touches neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from flowkit.engine.bound import BoundNode
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext

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

    endpoint: Any = None
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
    """Base class: a node kind's load-time and run-time behaviour."""

    name: ClassVar[str]

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        """What the node compiles to; None after reporting its problems to ``ctx``."""
        return Compiled()

    def prepare(self, node: Node, ctx: Any) -> Binding:
        """What a run (``ctx``) makes of the node before any row runs; raise UsageError."""
        return Binding()

    def run_sync(self, node: BoundNode, inputs: dict[str, Any], ctx: Any) -> NodeResult:
        """Run a node whose ``is_async`` is False, inline in the event loop's thread."""
        raise NotImplementedError

    async def run(self, node: BoundNode, inputs: dict[str, Any], ctx: Any) -> NodeResult:
        """Run a node whose ``is_async`` is True; the executor makes it a task."""
        return self.run_sync(node, inputs, ctx)


KINDS: dict[str, Kind] = {}


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: make a node kind available under ``cls.name``."""
    KINDS[cls.name] = cls()
    return cls


# The module of each built-in kind, imported on first use: not at the top, since the built-in
# kinds import the loader, and only the kinds a flow uses (the llm kind brings Jinja2 along).
_BUILTIN = {
    "python": "python",
    "aggregate": "python",
    "llm": "llm",
    "embedding": "embedding",
    "flow": "flow",
}


def get(kind: str) -> Kind:
    try:
        return KINDS[kind]
    except KeyError:
        import importlib

        importlib.import_module(f"flowkit.kinds.{_BUILTIN.get(kind, 'python')}")
        return KINDS[kind]
