"""Node kinds: an extension point registered by a decorator.

A kind knows how to prepare a node at load time (import its code, compile its prompt, report
what is wrong) and how to run it for one row. The loader and the executor look kinds up here by
the node's `type`, so adding a kind touches neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext


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
