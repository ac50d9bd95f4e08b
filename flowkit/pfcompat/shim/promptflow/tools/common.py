"""`promptflow.tools.common`: prompt rendering and chat parsing with flowkit's templates."""

from __future__ import annotations

from typing import Any

from flowkit.flow.templates import from_file_text, render_text


def render_jinja_template(template_content: str, **kwargs: Any) -> str:
    return render_text(template_content, **kwargs)


def parse_chat(chat_str: str, *args: Any, **kwargs: Any) -> list[dict[str, str]]:
    return from_file_text(chat_str, promptflow=True).render({})


def build_messages(prompt: str, **kwargs: Any) -> list[dict[str, str]]:
    return from_file_text(prompt, promptflow=True).render(kwargs)
