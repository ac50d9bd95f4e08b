"""The names azure-ai-evaluation, Databricks agent evaluation and Ragas give a flow's inputs
(``ALIASES``): the data's columns are read under them (flowkit.data.needs), and so is what a
``--target`` app replies (flowkit.flow.target, flowkit.kinds.app)."""

from __future__ import annotations

from collections.abc import Iterable

ALIASES: dict[str, tuple[str, ...]] = {
    "question": ("query", "request", "user_input"),
    "request": ("question", "query", "user_input"),
    "answer": ("response",),
    "response": ("answer",),
    "context": ("retrieved_context", "retrieved_contexts"),
    "documents": ("retrieved_context", "retrieved_contexts", "context"),
    "retrieved_context": ("retrieved_contexts", "context"),
    "ground_truth": ("expected_response", "reference"),
    "expected_response": ("ground_truth", "reference"),
    "messages": ("conversation",),
}
"""Flow input → the columns other tools name it, in no order of preference."""


def alias_for(name: str, columns: Iterable[str]) -> tuple[str | None, list[str]]:
    """(the column input ``name`` reads when the data lacks its own, or None; the candidate
    columns present, more than one when ambiguous)."""
    present = [c for c in ALIASES.get(name, ()) if c in set(columns)]
    return (present[0] if len(present) == 1 else None), present
