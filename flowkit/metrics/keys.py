"""The metric keys an aggregate function returns, declared where they are fixed.

A `--gate` on a metric the flow cannot produce should be refused before the first (maybe paid)
row. The prefixes of a flow's metrics are known from the flow alone; their keys are known only
where the function declares them, with ``@returns_keys``: a fixed list, or a rule that derives
the keys from the node's inputs (a column's name, a literal ``judge``, the ``levels`` given).
A function without a declaration, or a rule that answers None, has keys known only after the
run; gates on them are checked then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

KEYS_ATTRIBUTE = "flowkit_metric_keys"


class _PerRow:
    def __repr__(self) -> str:
        return "PER_ROW"


PER_ROW: Any = _PerRow()
"""What a rule sees for an input read from the rows (its value is known only at run time)."""

KeysRule = Callable[[dict[str, Any]], Iterable[str] | None]
"""The node's inputs (parameter → literal, or PER_ROW) → the keys, or None when unknown."""


def returns_keys(keys: Iterable[str] | KeysRule) -> Callable[[F], F]:
    """Declare the keys ``fn`` returns: a fixed list, or a :data:`KeysRule`. The function itself
    is returned unchanged (its code fingerprint stays the same)."""
    rule = keys if callable(keys) else _fixed(tuple(keys))

    def mark(fn: F) -> F:
        setattr(fn, KEYS_ATTRIBUTE, rule)
        return fn

    return mark


def _fixed(keys: tuple[str, ...]) -> KeysRule:
    return lambda inputs: keys


def declared_keys(fn: Any, inputs: dict[str, Any]) -> frozenset[str] | None:
    """The keys ``fn`` returns for a node with these inputs, or None when they are not known
    before the run."""
    rule = getattr(fn, KEYS_ATTRIBUTE, None)
    if rule is None:
        return None
    keys = rule(inputs)
    return None if keys is None else frozenset(keys)
