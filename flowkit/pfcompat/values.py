"""Values in a Prompt Flow node's inputs: references, and literals converted to the tool's types
as Prompt Flow's `_tool_resolver._convert_literal_input_types` converts them."""

from __future__ import annotations

import json
from typing import Any

REQUEST_PARAMS = (
    "temperature",
    "top_p",
    "stop",
    "max_tokens",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "user",
    "function_call",
    "functions",
    "tool_choice",
    "tools",
    "response_format",
    "seed",
)
"""The chat tool's parameters (`promptflow.tools.openai.chat`'s signature: it has no `n`, so an
input `n` is a template variable): every other llm node input is a template variable."""
CHAT_PARAM_TYPES = {
    "temperature": "double",
    "top_p": "double",
    "stop": "list",
    "max_tokens": "int",
    "presence_penalty": "double",
    "frequency_penalty": "double",
    "logit_bias": "object",
    "function_call": "object",
    "functions": "list",
    "tool_choice": "object",
    "tools": "list",
    "response_format": "object",
    "seed": "int",
}
"""The types of the chat tool's parameters (its signature), which Prompt Flow converts a literal
to: `max_tokens: "128"` is sent as 128, `response_format: '{"type": "json_object"}'` as JSON."""


MODEL_BY_REF = (
    "{key}: {ref} (a model per row) is not read; the node's model is flowkit's "
    "(--model, --connections NODE.model=..., flowkit.yaml)"
)
MODEL_PARAMS = ("deployment_name", "model")
DROPPED_PARAMS = ("stream",)


def literal_input(value: Any, kind: str | None, text_only: bool = False) -> Any:
    """A node's input: a literal converted to the tool's declared type (`k: "2"` for `k: int` is
    2; ValueError when it cannot be), a reference as given. ``text_only``: only text is converted,
    a number stays as the YAML writes it (chat parameters: see `number-types` in
    docs/prompt-flow-differences.md)."""
    if kind is None or is_ref(value) or (text_only and not isinstance(value, str)):
        return value
    return parse_value(kind, value)


def parse_value(kind: str, value: Any) -> Any:
    """Prompt Flow's `ValueType.parse`."""
    if kind == "int":
        return int(value)
    if kind == "double":
        return float(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueError(value)
    if kind == "string":
        return str(value)
    if kind == "list":
        value = json.loads(value) if isinstance(value, str) else value
        if not isinstance(value, list):
            raise ValueError(value)
        return value
    if kind == "object" and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def is_ref(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("${") and value.endswith("}")
