"""The keys a function's dict has, declared where they are fixed: an aggregate's metric keys,
or a python node's output keys.

A `--gate` on a metric the flow cannot produce should be refused before the first (maybe paid)
row. The prefixes of a flow's metrics are known from the flow alone; their keys are known only
where the function declares them, with ``@returns_keys``: a fixed list, or a rule that derives
the keys from the node's inputs (a column's name, a literal ``judge``, the ``levels`` given).
A function without a declaration, or a rule that answers None, has keys known only after the
run; gates on them are checked then. A python node's declared keys let the loader refuse a
reference to a key it never returns (``${parse.output.scroe}``, with "did you mean"), and two
aggregates of one flow declaring one metric key are refused before the run (flowkit.flow.wiring;
flowkit.flow.declared reads the declarations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from flowkit.flow.declared import KEYS_ATTRIBUTE, PER_ROW, KeysRule, declared_keys

F = TypeVar("F", bound=Callable[..., Any])


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


__all__ = ["PER_ROW", "KeysRule", "declared_keys", "returns_keys"]
