"""The SDK's private hooks the short path (``prepared``) leans on, checked before a client's
first request, and the one notice a run gets when its requests take the public API instead."""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any

from flowkit.llm.sdk import openai

__all__ = ["HOOKS", "missing_hooks", "note_public", "options_class"]

HOOKS = (
    "_prepare_options",
    "_build_request",
    "_prepare_request",
    "_send_request",
    "_make_status_error_from_response",
)
"""The SDK client's private methods the short path calls."""


def options_class() -> Any:
    """The SDK's ``FinalRequestOptions``, looked up where it is now, or None (moved)."""
    try:
        models = importlib.import_module("openai._models")
    except ImportError:
        return None
    found = getattr(models, "FinalRequestOptions", None)
    return found if callable(getattr(found, "construct", None)) else None


def _takes(hook: Any, name: str) -> bool:
    """Whether ``hook`` takes the arguments the short path passes it (a release that adds a
    required one fails here, at start, not on the first error status of a run)."""
    try:
        signature = inspect.signature(hook)
    except (TypeError, ValueError):  # no signature to be had (a builtin): take it as it is
        return True
    try:
        signature.bind(None, **({"stream": False} if name == "_send_request" else {}))
    except TypeError:
        return False
    return True


def missing_hooks(client: Any) -> list[str]:
    """The private names of the SDK the short path needs that ``client``'s SDK lacks, or has
    with other arguments than the short path passes."""
    missing = []
    for hook in HOOKS:
        found = getattr(client, hook, None)
        if not callable(found):
            missing.append(hook)
        elif not _takes(found, hook):
            missing.append(f"{hook} as called here (it takes other arguments)")
    if options_class() is None:
        missing.append("openai._models.FinalRequestOptions")
    return missing


def note_public(why: str) -> None:
    """Say once per run that requests take the SDK's public API, and why."""
    from flowkit.llm.session import current_session

    session = current_session()
    if "public-api" in session.noted:
        return
    session.noted.add("public-api")
    message = (
        f"openai {openai.__version__}: {why}; chat requests go through the SDK's public API "
        "(chat.completions.create), which costs more CPU per request"
    )
    logging.getLogger("flowkit.llm").warning("note: %s", message)
    session.notes.append(message)
