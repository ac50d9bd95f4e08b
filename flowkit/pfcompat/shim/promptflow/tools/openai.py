"""`promptflow.tools.openai.chat`: a chat call through flowkit.llm, the reply as text."""

from __future__ import annotations

from typing import Any

# The shim runs as the top-level `promptflow`, a name mypy does not resolve.
from promptflow.tools.aoai import _ask  # type: ignore[import-not-found]


def chat(connection: Any, prompt: str, model: str = "", **kwargs: Any) -> str:
    return _ask(connection, prompt, model, kwargs)


class OpenAI:
    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def chat(self, prompt: str, model: str = "", **kwargs: Any) -> str:
        return _ask(self.connection, prompt, model, kwargs)
