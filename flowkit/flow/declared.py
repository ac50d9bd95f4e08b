"""The keys of the dict a node's function returns, where the function declares them.

``flowkit.metrics.keys.returns_keys`` sets the declaration on a function; this module reads it,
below ``metrics`` and with nothing of flowkit imported, so the loader can check references and
metric keys against it, and so the functions that declare keys import no more code (their code
fingerprint reaches this file only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowkit.flow.graph import Node

KEYS_ATTRIBUTE = "flowkit_metric_keys"
"""The attribute ``returns_keys`` sets on a function: its :data:`KeysRule`."""


class _PerRow:
    def __repr__(self) -> str:
        return "PER_ROW"


PER_ROW: Any = _PerRow()
"""What a rule sees for an input read from the rows (its value is known only at run time)."""

KeysRule = Callable[[dict[str, Any]], Iterable[str] | None]
"""The node's inputs (parameter → literal, or PER_ROW) → the keys, or None when unknown."""


def declared_keys(fn: Any, inputs: dict[str, Any]) -> frozenset[str] | None:
    """The keys ``fn`` returns for a node with these inputs, or None when they are not known
    before the run."""
    rule = getattr(fn, KEYS_ATTRIBUTE, None)
    if rule is None:
        return None
    keys = rule(inputs)
    return None if keys is None else frozenset(keys)


def node_keys(node: Node) -> frozenset[str] | None:
    """The keys of the dict a python or aggregate node returns, when its function declares
    them; None when they are known only once it has run."""
    if node.kind not in ("python", "aggregate") or node.impl is None:
        return None
    if node.kind == "aggregate" and node.spec.metrics == "logged":
        return None  # its metrics are what it logs; its return value is any JSON
    inputs = {param: PER_ROW if ref is not None else value for param, ref, value in node.inputs}
    try:
        return declared_keys(getattr(node.impl, "fn", None), inputs)
    except Exception:  # a user's rule that fails says nothing: the keys stay unknown
        return None
