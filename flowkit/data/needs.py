"""What a flow needs from a row, and the column names other tools use for its inputs.

A flow whose inputs all have defaults may still need some of them in one of several
combinations: ``groundedness`` takes ``answer`` and ``context``, or a conversation in
``messages``. The flow declares them as ``shapes`` (flowkit.flow.spec); a flow that runs others
as sub-flow nodes needs what they need, through its wiring (:func:`requirements`). The run's
check before the first row and ``flowkit describe`` both read them from here.

``ALIASES`` (kept in flowkit.flow.aliases, where ``--target`` reads them too): the names
azure-ai-evaluation, Databricks agent evaluation and Ragas give the same data. A flow input
whose own column the data lacks reads the one alias column the data has (:func:`alias_for`);
with two candidates present it is ambiguous and left to ``--map``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flowkit.flow.aliases import ALIASES as ALIASES
from flowkit.flow.aliases import alias_for as alias_for
from flowkit.flow.graph import Flow

TOOLS: dict[str, str] = {
    "query": "azure-ai-evaluation",
    "context": "azure-ai-evaluation",
    "ground_truth": "azure-ai-evaluation",
    "conversation": "azure-ai-evaluation",
    "response": "azure-ai-evaluation, Databricks and Ragas",
    "request": "Databricks",
    "retrieved_context": "Databricks",
    "expected_response": "Databricks",
    "user_input": "Ragas",
    "retrieved_contexts": "Ragas",
    "reference": "Ragas",
    "question": "Prompt Flow",
    "answer": "Prompt Flow",
}
"""Whose name a column is, for the note that says which mapping was applied."""

REPLY_INPUTS = ("answer", "response")
"""Inputs that hold the app's reply: given as messages, they read the assistant's text (any
other text input given as messages reads the conversation as azure-ai-evaluation shows it to
its judges: every user and assistant turn, as text; a Databricks request its last user turn)."""

Requirement = tuple[str, tuple[tuple[str, ...], ...]]
"""(the flow that needs it, the input sets of which a row must fill one)."""


def alias_note(name: str, column: str) -> str:
    tool = TOOLS.get(column, "another tool")
    verb = "name" if " and " in tool else "names"
    return (
        f"input {name!r} reads column {column!r} (as {tool} {verb} "
        f"it); --map {name}='${{data.COLUMN}}' reads another"
    )


def requirements(flow: Flow) -> list[Requirement]:
    """Every shape requirement of ``flow`` over its own inputs: its declared ``shapes``, and
    those of each sub-flow node that always runs (a node with ``when`` is skipped when its data
    is missing, as suites intend), translated through the node's wiring. A sub-flow input fed
    by another node or a literal is satisfied; one left to its default cannot be."""
    found: list[Requirement] = []
    required = {n for n, spec in flow.inputs.items() if spec.required}
    if flow.spec.shapes:
        found.append((flow.name, tuple(tuple(s) for s in flow.spec.shapes)))
    for node in flow.nodes.values():
        if node.kind != "flow" or node.when or not isinstance(node.impl, Flow):
            continue
        wiring = {param: ref for param, ref, _ in node.inputs}
        for who, shapes in requirements(node.impl):
            usable: list[tuple[str, ...]] = []
            for shape in shapes:
                if any(name not in wiring for name in shape):
                    continue
                refs = [wiring[name] for name in shape]
                usable.append(tuple(r.name for r in refs if r is not None and r.source == "inputs"))
            if usable and all(tuple(usable) != s for _, s in found):
                found.append((who, tuple(usable)))  # one need, however many sub-flows share it
    # A shape of required inputs only is met whenever the run starts at all.
    return [(who, shapes) for who, shapes in found if not any(set(s) <= required for s in shapes)]


def unmet(flow: Flow, has: Callable[[str], bool]) -> list[Requirement]:
    """The requirements of which no shape has every input filled (``has(input)``)."""
    return [
        (who, shapes)
        for who, shapes in requirements(flow)
        if not any(all(has(name) for name in shape) for shape in shapes)
    ]


def shapes_text(shapes: Iterable[tuple[str, ...]]) -> str:
    """``'answer' and 'context', or 'messages'``."""
    return ", or ".join(" and ".join(map(repr, shape)) for shape in shapes)
