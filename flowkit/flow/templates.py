"""Prompt templates: Jinja2 in its sandbox, turned into chat messages.

A prompt file is split into messages by lines that hold only a role (`system:`, `user:`,
`assistant:`). The markers are swapped for a per-process nonce *before* rendering, so a loop in
the template may still emit several turns, while data that happens to contain "user:" can never
open a new message. Values are rendered as values: `{{ }}` inside data is never evaluated.
"""

from __future__ import annotations

import functools
import re
import secrets
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateError, TemplateSyntaxError, meta, nodes
from jinja2.sandbox import SandboxedEnvironment

from flowkit.errors import FlowkitError

ROLES = ("system", "user", "assistant")
_MARKER = re.compile(r"^[ \t]*(system|user|assistant)[ \t]*:[ \t]*$", re.M | re.I)
_HASHED_MARKER = re.compile(r"^[ \t]*#?[ \t]*(system|user|assistant)[ \t]*:[ \t]*$", re.M | re.I)
_PF_MARKER = re.compile(
    r"^[ \t]*#?[ \t]*(system|user|assistant|function|tool)[ \t]*:[ \t]*(?=\n)", re.M | re.I
)
"""Prompt Flow's chat rules: `function` and `tool` roles too, and only a line that ends (a role
on the file's last line, with no newline after it, is text)."""
_PF_FIELDS = {
    key: re.compile(
        rf"\n*#{{0,2}}\s*{key}\s*:\s*\n+\s*(\S+)\s*\n*#{{0,2}}\s*content\s*:\s*\n?(.*)", re.S
    )
    for key in ("name", "tool_call_id")
}
"""A turn written `name:` NAME `content:` TEXT (any role; a `function` turn must) or
`tool_call_id:` ID `content:` TEXT (a `tool` turn must), as Prompt Flow reads them."""
_NONCE = secrets.token_hex(8)
_SPLIT = re.compile(rf"\x00{_NONCE}:(system|user|assistant|function|tool)\x00")

_env = SandboxedEnvironment(
    undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False, trim_blocks=True
)
_lenient_env = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True, trim_blocks=True)
"""Prompt Flow renders prompts with Jinja's default Undefined: a variable no input gives is ''."""


class PromptSyntaxError(ValueError):
    """A Jinja2 syntax error, with the line inside the template."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class PromptRenderError(FlowkitError):
    """A prompt that failed for one row: an undefined variable, or an access the sandbox denied."""

    def __init__(self, err: Exception) -> None:
        line = _template_line(err)
        where = f"prompt template line {line}" if line else "prompt template"
        super().__init__(f"{where}: {getattr(err, 'message', None) or err}")
        self.line = line


def _template_line(err: BaseException) -> int:
    """The template line the error was raised at (Jinja2 rewrites its traceback to show it)."""
    tb, line = err.__traceback__, 0
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


@dataclass(frozen=True)
class PromptTemplate:
    """A compiled prompt: one template per message, or a whole file with role markers."""

    source: str
    variables: frozenset[str]
    _parts: tuple[tuple[str | None, Any], ...]
    promptflow: bool = False
    """Prompt Flow's chat rules: every turn is kept, an empty one too, and `name:` is read."""

    def render(self, values: dict[str, Any]) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = []
        for role, template in self._parts:
            try:
                text = template.render(values)
            except (TemplateError, OverflowError) as err:  # OverflowError: the sandbox's range cap
                raise PromptRenderError(err) from None
            if role is not None:
                messages.append({"role": role, "content": text.strip()})
                continue
            messages.extend(_split_roles(text))
        if self.promptflow:
            return [_named(m) for m in messages]
        return [m for m in messages if m["content"] or m["role"] != "user"]


def _named(message: dict[str, str]) -> dict[str, str]:
    """A turn as Prompt Flow's parse_chat reads it: `name:`/`content:` inside a turn's text set
    the message's name; a `function` turn must have one, a `tool` turn a `tool_call_id:`."""
    role = message["role"]
    key = "tool_call_id" if role == "tool" else "name"
    found = _PF_FIELDS[key].search(message["content"])
    if found is None:
        if role in ("function", "tool"):
            raise FlowkitError(
                f"a {role!r} turn must be written '{key}:' {key.upper()} 'content:' TEXT, as "
                "Prompt Flow requires"
            )
        return message
    return {"role": role, key: found[1], "content": found[2].strip()}


def _split_roles(text: str) -> list[dict[str, str]]:
    pieces = _SPLIT.split(text)
    out: list[dict[str, str]] = []
    head = pieces[0].strip()
    if head:
        out.append({"role": "user" if len(pieces) == 1 else "system", "content": head})
    for i in range(1, len(pieces), 2):
        out.append({"role": pieces[i], "content": pieces[i + 1].strip()})
    return out


@functools.lru_cache(maxsize=256)
def _compile(source: str, env: SandboxedEnvironment = _env) -> tuple[Any, frozenset[str]]:
    """The template and its variables, compiled once per text and environment: a flow's nodes
    often share a prompt file (a built-in judge's llm node and its ``for_each`` twin), and a
    compiled template is only ever rendered, so one serves them all."""
    try:
        ast = env.parse(source)
    except TemplateSyntaxError as err:
        raise PromptSyntaxError(f"Jinja2 syntax error: {err.message}", err.lineno or 0) from None
    _check_private(ast)
    _check_no_loading(ast)
    return env.from_string(ast), frozenset(meta.find_undeclared_variables(ast))


def _check_no_loading(ast: nodes.Template) -> None:
    """Prompts have no loader: `{% include %}`, `{% import %}` and `{% extends %}` would fail on
    every row, so they are refused when the flow loads."""
    for node in ast.find_all((nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)):
        tag = {"Include": "include", "Import": "import", "FromImport": "from … import"}.get(
            type(node).__name__, "extends"
        )
        raise PromptSyntaxError(
            f"{{% {tag} %}} is not supported in prompts: put the text in the prompt itself "
            "(or pass it in as an input)",
            node.lineno,
        )


def _check_private(ast: nodes.Template) -> None:
    """Refuse at load time what the sandbox would refuse on every row: `x.__class__` and kin.

    Dunder names are how templates climb out to Python internals, and no prompt needs them. A
    single leading '_' is left alone: `doc._id` and `doc["_id"]` are ordinary keys of exported
    data; a private attribute of an object, or a name built from data, is still stopped by the
    sandbox itself, on the row.
    """
    found: list[tuple[int, str]] = []
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        key: object
        if isinstance(node, nodes.Getattr):
            key = node.attr
        else:
            assert isinstance(node, nodes.Getitem)  # the two classes find_all was given
            key = getattr(node.arg, "value", None)
        if isinstance(key, str) and key.startswith("__"):
            found.append((node.lineno, key))
    if found:
        line = min(n for n, _ in found)
        # Outer accesses are found first; reversed, `x.__class__.__mro__` reads left to right.
        keys = dict.fromkeys(k for n, k in reversed(found) if n == line)
        raise PromptSyntaxError(
            f"the template reads {', '.join(map(repr, keys))}; the sandbox forbids names "
            "that start with '__'",
            line,
        )


def from_file_text(source: str, hashed: bool = False, promptflow: bool = False) -> PromptTemplate:
    """Compile a prompt file whose role markers split it into messages (``hashed``: `# user:`
    counts as a marker too, as in prompts written for other tools; ``promptflow``: Prompt Flow's
    chat rules, which are hashed markers, a `function` role, every turn kept and undefined
    variables rendered empty)."""
    pattern = _PF_MARKER if promptflow else _HASHED_MARKER if hashed else _MARKER
    marked = pattern.sub(lambda m: f"\x00{_NONCE}:{m[1].lower()}\x00", source)
    template, variables = _compile(marked, _lenient_env if promptflow else _env)
    return PromptTemplate(source, variables, ((None, template),), promptflow)


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


_text_env = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True, trim_blocks=True)


def render_text(template: str, **values: Any) -> str:
    """Render a Jinja2 text in the sandbox, leniently: an undefined variable renders as ''.

    A python node can call this (`function: flowkit.flow.templates:render_text`) to turn a
    template into one string rather than chat messages.
    """
    try:
        return _text_env.from_string(template).render(**values)
    except (TemplateError, OverflowError) as err:
        raise PromptRenderError(err) from None
