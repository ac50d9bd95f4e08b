"""Prompt templates: Jinja2 in its sandbox, turned into chat messages.

A prompt file is split into messages by lines that hold only a role (`system:`, `user:`,
`assistant:`). The markers are swapped for a per-process nonce *before* rendering, so a loop in
the template may still emit several turns, while data that happens to contain "user:" can never
open a new message. Values are rendered as values: `{{ }}` inside data is never evaluated.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, meta
from jinja2.sandbox import SandboxedEnvironment

ROLES = ("system", "user", "assistant")
_MARKER = re.compile(r"^[ \t]*(system|user|assistant)[ \t]*:[ \t]*$", re.M | re.I)
_NONCE = secrets.token_hex(8)
_SPLIT = re.compile(rf"\x00{_NONCE}:(system|user|assistant)\x00")

_env = SandboxedEnvironment(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False, trim_blocks=True
)


class PromptSyntaxError(ValueError):
    """A Jinja2 syntax error, with the line inside the template."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class PromptTemplate:
    """A compiled prompt: one template per message, or a whole file with role markers."""

    source: str
    variables: frozenset[str]
    _parts: tuple[tuple[str | None, Any], ...]

    def render(self, values: dict[str, Any]) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = []
        for role, template in self._parts:
            text = template.render(values)
            if role is not None:
                messages.append({"role": role, "content": text.strip()})
                continue
            messages.extend(_split_roles(text))
        return [m for m in messages if m["content"] or m["role"] != "user"]


def _split_roles(text: str) -> list[dict[str, str]]:
    pieces = _SPLIT.split(text)
    out: list[dict[str, str]] = []
    head = pieces[0].strip()
    if head:
        out.append({"role": "user" if len(pieces) == 1 else "system", "content": head})
    for i in range(1, len(pieces), 2):
        out.append({"role": pieces[i], "content": pieces[i + 1].strip()})
    return out


def _compile(source: str) -> tuple[Any, frozenset[str]]:
    try:
        ast = _env.parse(source)
    except TemplateSyntaxError as err:
        raise PromptSyntaxError(f"Jinja2 syntax error: {err.message}", err.lineno or 0) from None
    return _env.from_string(ast), frozenset(meta.find_undeclared_variables(ast))


def from_file_text(source: str) -> PromptTemplate:
    """Compile a prompt file whose role markers split it into messages."""
    marked = _MARKER.sub(lambda m: f"\x00{_NONCE}:{m[1].lower()}\x00", source)
    template, variables = _compile(marked)
    return PromptTemplate(source, variables, ((None, template),))


def from_messages(messages: list[tuple[str, str]]) -> PromptTemplate:
    """Compile inline `messages:` templates, one per role."""
    parts: list[tuple[str | None, Any]] = []
    variables: set[str] = set()
    for role, content in messages:
        template, names = _compile(content)
        parts.append((role, template))
        variables |= names
    source = "\n".join(f"{role}:\n{content}" for role, content in messages)
    return PromptTemplate(source, frozenset(variables), tuple(parts))
