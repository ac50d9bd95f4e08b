"""Variants of an llm node: other prompts, models and parameters to compare without copying the
flow (docs/variants.md).

    - name: answer
      type: llm
      prompt: prompts/answer.jinja2
      params: {temperature: 0}
      variants:
        terse: {prompt: prompts/terse.jinja2}
        warm: {params: {temperature: 0.8}, model: gpt-4o}

The node as written is the variant `default`; a variant replaces the prompt (`prompt` or
`messages`) and the model it names and updates the params. Which one a load takes is ``CHOSEN``
(`flowkit run --variant '${answer.terse}'`; `--variants all` runs each in turn). Prompt Flow's
`node_variants` choose through the same ``CHOSEN`` (flowkit.pfcompat.variants).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowkit.errors import did_you_mean, one_of
from flowkit.flow.source import YDict, line_of

if TYPE_CHECKING:
    from flowkit.flow.loader import LoadContext

DEFAULT = "default"
"""The node as written."""
VARIANT_KEYS = ("prompt", "messages", "model", "params", "description")


@dataclass(frozen=True)
class Choice:
    """`--variant '${node.variant_id}'`: the node tuned and the variant it runs."""

    node: str
    variant: str

    def __str__(self) -> str:
        return f"${{{self.node}.{self.variant}}}"


CHOSEN: ContextVar[Choice | None] = ContextVar("flowkit_variant", default=None)
"""The variant the flows loaded in this context take (set by `flowkit run --variant`)."""


@contextlib.contextmanager
def chosen_variant(text: str | None) -> Iterator[None]:
    """Loads inside take the variant ``text`` (`${node.variant}`, as a run records it)."""
    if not text:
        yield
        return
    from flowkit.pfcompat.variants import parse_choice

    token = CHOSEN.set(parse_choice(text))
    try:
        yield
    finally:
        CHOSEN.reset(token)


_NAME = re.compile(r"^[^.{}\s]+$")
"""A variant name `--variant '${node.NAME}'` can write."""


def declared(raw: Any) -> dict[str, list[str]]:
    """Per node of a native flow mapping, the variant ids it declares (`default` first)."""
    out: dict[str, list[str]] = {}
    for node in raw.get("nodes") or [] if isinstance(raw, dict) else []:
        if isinstance(node, dict) and isinstance(node.get("variants"), dict):
            out[str(node.get("name"))] = [DEFAULT, *map(str, node["variants"])]
    return out


def applied(ctx: LoadContext, raw: YDict, file: str, name: str | None) -> YDict | None:
    """The node mapping with the chosen variant applied and `variants` removed; None after
    reporting a fault in its `variants`."""
    variants = raw.get("variants")
    rest = YDict({k: v for k, v in raw.items() if k != "variants"})
    rest.file, rest.line = raw.file, raw.line
    rest.key_lines = getattr(raw, "key_lines", {})
    if not isinstance(variants, dict) or raw.get("type") != "llm":
        problem = "variants must be a mapping of variant names to prompt, model and params"
        if isinstance(variants, dict):
            problem = f"variants are for llm nodes (this node's type is {raw.get('type')!r})"
        ctx.report(file, line_of(raw, "variants"), name, problem)
        return None
    for vid, spec in variants.items():
        bad = sorted(set(spec) - set(VARIANT_KEYS)) if isinstance(spec, dict) else None
        unnamable = not isinstance(vid, str) or not _NAME.match(vid)
        if vid == DEFAULT or unnamable or bad is None or bad:
            why = "a variant sets prompt or messages, model, params and description"
            if vid == DEFAULT:
                why = "'default' names the node as written"
            elif unnamable:  # `--variant '${node.ID}'` could not name it
                why = "a variant's name has no '.', braces or spaces"
            elif bad:
                why += f", not {', '.join(map(repr, bad))}"
            ctx.report(file, line_of(variants, vid), name, f"variant {vid!r}: {why}")
            return None
    choice = CHOSEN.get()
    if choice is None or choice.node != name or choice.variant == DEFAULT:
        return rest
    spec = variants.get(choice.variant)
    if spec is None:
        ctx.report(
            file,
            line_of(raw, "variants"),
            name,
            f"no variant {choice.variant!r}{did_you_mean(choice.variant, list(variants))} "
            f"(variants: {one_of([DEFAULT, *variants])})",
        )
        return None
    if "prompt" in spec or "messages" in spec:
        rest.pop("prompt", None)
        rest.pop("messages", None)
    for key, value in spec.items():
        if key == "params" and isinstance(value, dict):
            rest["params"] = {**(rest.get("params") or {}), **value}
        else:
            rest[key] = value
    return rest
