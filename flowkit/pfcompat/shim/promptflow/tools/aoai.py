"""`promptflow.tools.aoai.chat`: a chat call through flowkit.llm, the reply as text."""

from __future__ import annotations

from typing import Any

_PARAMS: tuple[str, ...] = ("temperature", "top_p", "n", "stop", "max_tokens", "presence_penalty")
_PARAMS += ("frequency_penalty", "logit_bias", "user", "response_format", "seed")


def _ask(connection: Any, prompt: str, model: str, kwargs: dict[str, Any]) -> str:
    from flowkit.kinds.calls import node_call
    from flowkit.pfcompat.connections import chat, endpoint_for, run_settings

    call = node_call()  # the run this call belongs to, even from a thread the tool started
    settings = run_settings(call)
    endpoint = getattr(connection, "_endpoint", None) or endpoint_for(None, settings=settings)
    params = {k: kwargs.pop(k) for k in list(kwargs) if k in _PARAMS}
    kwargs.pop("stream", None)
    # flowkit's configured model wins over the one written in the code, as for llm nodes.
    chosen = settings.default_model or model or endpoint.model
    return chat(endpoint, chosen, prompt, params, call, **kwargs)


def chat(connection: Any, prompt: str, deployment_name: str = "", **kwargs: Any) -> str:
    return _ask(connection, prompt, deployment_name, kwargs)


class AzureOpenAI:
    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def chat(self, prompt: str, deployment_name: str = "", **kwargs: Any) -> str:
        return _ask(self.connection, prompt, deployment_name, kwargs)
