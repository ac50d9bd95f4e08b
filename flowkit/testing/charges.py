"""What the test server takes from its tokens-per-minute budget for a chat request.

Written from the endpoints' published rules, **not** from flowkit's client (this module imports
nothing from ``flowkit.llm``): the tests that the pacer's estimate of a request equals the
server's charge compare two implementations of one rule, so a slip on either side (a parameter
read wrong, ``n`` forgotten, a message left out of the count) fails them. Were the server to
call the client's own function, those tests could not fail.

- ``prompt_plus_max`` (Azure OpenAI's quota docs: the estimate made when a request arrives from
  its prompt text and the ``max_tokens`` setting): the prompt's tokens plus the output cap
  (``max_completion_tokens``, else ``max_tokens``) times ``n``;
- ``max_of`` (OpenAI's rate-limit guide: the larger of ``max_tokens`` and an estimate from the
  request's characters): the larger of the output cap times ``n`` and the messages' characters
  divided by 4;
- ``usage``: the prompt's words on arrival, the completion's words when the reply is made (the
  server's own usage figures); also what a request without an output cap is charged by, since
  no endpoint can reserve a cap that was not given.

The server has no tokenizer: it counts a prompt's tokens as flowkit's documentation says an
endpoint's are estimated when no tokenizer knows the model, 4 characters a token (rounded down)
plus 4 tokens a message for its role and separators.
"""

from __future__ import annotations

from typing import Any

RULES = ("prompt_plus_max", "max_of", "usage")


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def on_arrival(rule: str, messages: list[dict[str, Any]], n: int, cap: int | None) -> int | None:
    """What a request with ``messages``, asking ``n`` replies of at most ``cap`` tokens each,
    costs the budget as it arrives under ``rule``; None when it is charged by usage."""
    if rule == "usage" or not cap:
        return None
    reserved = cap * n
    chars = sum(len(_text(m.get("content"))) for m in messages)
    if rule == "max_of":
        return max(reserved, chars // 4)
    return chars // 4 + 4 * len(messages) + reserved
