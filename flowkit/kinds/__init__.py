"""Node kinds: an extension point registered by a decorator.

A kind owns its node's schema and traits: the pydantic model a node's YAML is validated with
(``spec_model``), which of its fields name files relative to the flow file (``path_fields``),
and whether it calls a model endpoint (``calls_endpoint``). It knows how to prepare a node at
load time (import its code, compile its prompt, report what is wrong) and how to run it for one
row. The loader and the executor look kinds up here by the node's `type`, so a kind registered
with ``@register`` and nothing else is a node type like the built-in ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext
    from flowkit.flow.spec import NodeSpec


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

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> None:
        """Prepare ``node.impl``, ``node.key_parts`` and ``node.is_async``; report problems."""

    def prepare(self, node: Node, ctx: Any) -> None:
        """Bind run-time settings (the model endpoint) before any row runs; raise UsageError."""

    def run_sync(self, node: Node, inputs: dict[str, Any], ctx: Any) -> NodeResult:
        """Run a node whose ``is_async`` is False, inline in the event loop's thread."""
        raise NotImplementedError

    async def run(self, node: Node, inputs: dict[str, Any], ctx: Any) -> NodeResult:
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


def names() -> list[str]:
    """Every node type a flow may use: the built-in ones, then those registered since."""
    return [*_BUILTIN, *(name for name in KINDS if name not in _BUILTIN)]


def get(kind: str) -> Kind:
    """The kind registered as ``kind`` (a built-in one is imported now); KeyError if none."""
    try:
        return KINDS[kind]
    except KeyError:
        if kind not in _BUILTIN:
            raise
        import importlib

        importlib.import_module(f"flowkit.kinds.{_BUILTIN[kind]}")
        return KINDS[kind]
