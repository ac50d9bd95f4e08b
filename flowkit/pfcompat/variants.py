"""Prompt Flow's node variants: `node_variants` and nodes with `use_variants: true`.

Prompt Flow replaces each node that uses variants by the chosen variant's `node` mapping, keeping
only the node's name: the variant named by `--variant '${node.variant_id}'` for that node, the
node's `default_variant_id` for every other. This module picks the variants (for one run, or every
variant of the tuned node in turn, `--variants all`) and reports what Prompt Flow would refuse.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.flow.source import YDict, YList
from flowkit.flow.variants import CHOSEN, Choice

Reporter = Callable[[Any, Any, "str | None", str], None]

_VARIANT = re.compile(r"^\$\{([^.{}\s]+)\.([^.{}\s]+)\}$")


def parse_choice(text: str) -> Choice:
    """`${node.variant_id}`, as `pf run create --variant` takes it."""
    found = _VARIANT.match(text.strip())
    if found is None:
        raise UsageError(
            f"--variant {text!r} must be written '${{NODE.VARIANT_ID}}', e.g. "
            "'${summarize.variant_1}'"
        )
    return Choice(found[1], found[2])


def variant_ids(raw: Any, node: str) -> list[str]:
    """The variant ids `node_variants` declares for a node, in the file's order."""
    entry = (raw.get("node_variants") or {}).get(node) if isinstance(raw, dict) else None
    variants = entry.get("variants") if isinstance(entry, dict) else None
    return [str(k) for k in variants] if isinstance(variants, dict) else []


def tuned_nodes(raw: Any) -> list[str]:
    """The nodes that use variants, in the file's order."""
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    return [
        str(n.get("name"))
        for n in nodes or []
        if isinstance(n, dict) and n.get("use_variants") is True
    ]


def check_choice(raw: Any, choice: Choice) -> None:
    """Refuse a `--variant` the flow does not declare, as Prompt Flow does, before any row runs."""
    names = [n.get("name") for n in raw.get("nodes") or [] if isinstance(n, dict)]
    if choice.node not in names:
        raise UsageError(
            f"--variant {choice}: node {choice.node!r} not found in the flow"
            f"{did_you_mean(choice.node, [str(n) for n in names])}"
        )
    ids = variant_ids(raw, choice.node)
    if choice.variant not in ids:
        raise UsageError(
            f"--variant {choice}: variant {choice.variant!r} not found for node "
            f"{choice.node!r}{did_you_mean(choice.variant, ids)} (variants: {one_of(ids)})"
        )


def resolve(raw_node: Any, node_variants: Any) -> tuple[Any, str | None, str | None]:
    """The node mapping that runs in place of ``raw_node``, the variant id taken, and the error
    Prompt Flow would raise instead (None when there is none)."""
    name = raw_node.get("name")
    entry = node_variants.get(name) if isinstance(node_variants, dict) else None
    if not isinstance(entry, dict):
        return None, None, f"node {name!r} has use_variants: true but node_variants has no {name}"
    choice = CHOSEN.get()
    wanted = choice.variant if choice is not None and choice.node == name else None
    wanted = wanted or entry.get("default_variant_id")
    if not wanted:
        return None, None, f"node_variants.{name} names no default_variant_id"
    given = entry.get("variants")
    variants: dict[str, Any] = given if isinstance(given, dict) else {}
    if wanted not in variants:
        return (
            None,
            None,
            f"variant {wanted!r} is not in node_variants.{name}"
            + (did_you_mean(str(wanted), [str(v) for v in variants])),
        )
    picked = variants[wanted]
    node = picked.get("node") if isinstance(picked, dict) else None
    if not isinstance(node, dict):
        return None, None, f"node_variants.{name}.variants.{wanted} has no node"
    return node, str(wanted), None


def applied(raw: Any, report: Reporter, picked: dict[str, str]) -> YList:
    """The flow's nodes with each `use_variants: true` node replaced by its variant's node (its
    name kept), as Prompt Flow does before it runs a flow; ``picked`` gets the variant ids."""
    given = raw.get("nodes")
    nodes = given if isinstance(given, YList) else YList()
    out = YList()
    out.item_lines = []
    for i, node in enumerate(nodes):
        if isinstance(node, YDict) and node.get("use_variants") is True:
            variant, taken, problem = resolve(node, raw.get("node_variants"))
            if problem is not None or not isinstance(variant, YDict):
                report(node, "use_variants", str(node.get("name")), str(problem))
                continue
            replaced = YDict({"name": node.get("name"), **variant})
            replaced.file, replaced.line = variant.file, variant.line
            replaced.key_lines = {**getattr(variant, "key_lines", {}), "name": node.line_of("name")}
            picked[str(node.get("name"))] = str(taken)
            node = replaced
        out.append(node)
        out.item_lines.append(nodes.line_of(i))
    return out
