"""What a request costs an endpoint's tokens-per-minute budget, counted as the endpoint counts it.

Hosted endpoints charge a request **when it arrives**, before any token is generated, so the
reply's ``usage`` comes too late and too low to pace by:

- ``prompt_plus_max`` (Azure OpenAI; Cerebras and most OpenAI-compatible gateways): the prompt's
  tokens plus ``max_tokens`` (or ``max_completion_tokens``) times ``n``;
- ``max_of`` (OpenAI's rate-limit guide): the larger of ``max_tokens`` × ``n`` and an estimate
  from the request's characters;
- ``usage``: what the reply's ``usage`` says (the prompt on arrival, the completion after; what
  self-hosted servers that count tokens at all do).

A connection names its rule as ``token_charge``; unset, it is ``max_of`` for the public OpenAI
API and ``prompt_plus_max`` for everything else (:func:`default_rule`). A request without an
output cap is charged as ``usage`` whatever the rule (no endpoint can reserve an unknown cap).

Prompt tokens are counted with tiktoken where it is installed and its encoding for the model is
already on disk (it downloads encodings on first use, which an offline machine cannot do);
otherwise estimated from characters: ``CHARS_PER_TOKEN`` characters a token plus
``PER_MESSAGE`` tokens a message (the role and separators OpenAI's chat format adds). The
flowkit test server charges by its own implementation of the same published rules
(``flowkit.testing.charges``, which imports nothing from here), so a test that the pacer's
estimate equals the server's charge can fail; a real endpoint's charge is learned from its
headers (``learner``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

TokenCharge = Literal["prompt_plus_max", "max_of", "usage"]
RULES: tuple[TokenCharge, ...] = ("prompt_plus_max", "max_of", "usage")
CHARS_PER_TOKEN = 4
"""Characters a token in the estimate (OpenAI's rule of thumb for English text)."""
PER_MESSAGE = 4
"""Tokens each chat message adds for its role and separators (3 in OpenAI's count, plus one)."""


class Reckoned(TypedDict):
    """A request's charge as the scheduler takes it (``Scheduler.run``'s keywords)."""

    tokens: int
    """What it costs by the connection's rule (by usage: its reservation)."""
    on_arrival: bool
    """Whether the rule charges it on arrival (else by the reply's usage)."""
    detail: str
    """How ``tokens`` was counted, for a refusal before sending."""
    cap: str
    """The output cap's parameter as the request sets it (``max_completion_tokens`` or
    ``max_tokens``), for the same."""
    rule: TokenCharge
    """The rule ``tokens`` was counted by."""
    rules: dict[str, int]
    """What it costs by each rule (``usage``: its reservation), so the headers can show which
    one the endpoint charges by; empty without an output cap (every rule charges usage)."""


class OverBudget(ValueError):
    """A request that alone costs more than the endpoint's whole tokens-per-minute budget: no
    wait would ever let it through, so it is refused before it is sent."""


def within_budget(
    charge: int, limit: int | None, where: str, detail: str, on_arrival: bool, cap: str
) -> int:
    """A request charged on arrival more than the whole token budget (``limit``, of the
    endpoint at ``where``) would wait (or be refused) forever: refuse it now, naming the
    figures (``detail``: how it was counted; ``cap``: its output cap's parameter). Charged by
    usage, the estimate (with the output cap) is only a reservation until the reply says what
    it used, and a short reply fits: reserve at most the whole budget and send it."""
    if limit is None or charge <= limit:
        return charge
    if not on_arrival:
        return limit
    how = f" ({detail})" if detail else ""
    raise OverBudget(
        f"request refused before sending: it costs an estimated {charge:,} tokens{how}, "
        f"more than the {limit:,} tokens per minute {where} allows in all; "
        f"lower {cap} (or n), or shorten the prompt"
    )


def default_rule(kind: str, public_openai: bool) -> TokenCharge:
    """The rule an endpoint of ``kind`` charges by when its connection names none."""
    return "max_of" if kind == "openai" and public_openai else "prompt_plus_max"


def message_chars(messages: Sequence[dict[str, Any]]) -> int:
    """Characters of the messages' text (a list of content parts counts its text parts)."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(
                len(str(part.get("text", ""))) for part in content if isinstance(part, dict)
            )
    return chars


def prompt_tokens(model: str, messages: Sequence[dict[str, Any]]) -> int:
    """The prompt's tokens: tiktoken's count where its encoding for ``model`` loads offline,
    else the characters-based estimate."""
    encode = _encoder(model)
    if encode is None:
        return message_chars(messages) // CHARS_PER_TOKEN + PER_MESSAGE * len(messages)
    total = 3  # every reply is primed with <|start|>assistant<|message|>
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if isinstance(content, list):
            text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 3 + len(encode(text)) + len(encode(str(message.get("role", ""))))
    return total


def cap_name(params: dict[str, Any]) -> str:
    """The output cap's parameter as the request sets it."""
    return "max_completion_tokens" if "max_completion_tokens" in params else "max_tokens"


def output_cap(params: dict[str, Any]) -> int:
    """The most tokens the reply may take: ``max_completion_tokens`` (or ``max_tokens``) × n;
    0 when the request sets no cap."""
    cap = params.get("max_completion_tokens") or params.get("max_tokens") or 0
    return int(cap) * int(params.get("n") or 1)


def arrival_charge(
    rule: TokenCharge, model: str, messages: Sequence[dict[str, Any]], params: dict[str, Any]
) -> int | None:
    """What the endpoint takes from its budget when the request arrives, or None when it charges
    by the reply's usage (the ``usage`` rule, or a request without an output cap)."""
    cap = output_cap(params)
    if rule == "usage" or not cap:
        return None
    if rule == "max_of":
        return max(cap, message_chars(messages) // CHARS_PER_TOKEN)
    return prompt_tokens(model, messages) + cap


def reckon(
    rule: TokenCharge, model: str, messages: Sequence[dict[str, Any]], params: dict[str, Any]
) -> Reckoned:
    """What a request costs under the connection's ``token_charge`` ``rule`` (and under each
    rule, for the learner), as ``Scheduler.run`` takes it."""
    cap, named = output_cap(params), cap_name(params)
    prompt = prompt_tokens(model, messages)
    rules: dict[str, int] = {}
    if cap:
        rules = {r: arrival_charge(r, model, messages, params) or 0 for r in RULES[:2]}
        rules["usage"] = prompt + cap
    arrival = rules.get(rule) if rule != "usage" else None
    if arrival is None:
        tokens, detail = prompt + cap, f"prompt {prompt:,} + output cap {cap:,}"
    elif rule == "max_of":
        tokens, detail = arrival, f"max_of: output cap {cap:,} vs characters / 4"
    else:
        tokens, detail = arrival, f"prompt {prompt:,} + {named} × n {cap:,}"
    return Reckoned(
        tokens=tokens,
        on_arrival=arrival is not None,
        detail=detail,
        cap=named,
        rule=rule,
        rules=rules,
    )


_encoders: dict[str, Callable[[str], list[int]] | None] = {}


def _encoder(model: str) -> Callable[[str], list[int]] | None:
    """tiktoken's encoder for ``model`` when tiktoken is installed, knows the model and has its
    encoding cached on disk; None otherwise (remembered per model: asked on every request)."""
    if model in _encoders:
        return _encoders[model]
    found: Callable[[str], list[int]] | None = None
    try:
        import tiktoken
        import tiktoken.model

        name = tiktoken.model.encoding_name_for_model(model)
        if _cached(name):
            found = tiktoken.get_encoding(name).encode_ordinary
    except Exception:  # not installed, unknown model, a damaged cache: estimate instead
        found = None
    _encoders[model] = found
    return found


def _cached(encoding: str) -> bool:
    """Whether tiktoken would load ``encoding`` from its disk cache (where tiktoken keeps it:
    $TIKTOKEN_CACHE_DIR, else $DATA_GYM_CACHE_DIR, else its default folder, by the SHA-1 of
    the blob's URL) rather than download it. Set but empty, either variable turns tiktoken's
    cache off: every load downloads, so nothing counts as cached."""
    url = f"https://openaipublic.blob.core.windows.net/encodings/{encoding}.tiktoken"
    if encoding == "gpt2":
        return False  # two files from another URL: not worth a guess
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if name in os.environ:
            folder = os.environ[name]
            break
    else:
        folder = _default_cache_folder()
    if not folder:
        return False
    return os.path.exists(os.path.join(folder, hashlib.sha1(url.encode()).hexdigest()))


def _default_cache_folder() -> str:
    """tiktoken's own default cache folder: <tmp>/data-gym-cache up to 0.14, the folder its
    ``load._default_cache_dir`` names where a later version has one."""
    try:
        from tiktoken import load

        default = getattr(load, "_default_cache_dir", None)
        if callable(default):
            return str(default())
    except Exception:  # not installed, or laid out otherwise: the folder 0.14 uses
        pass
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")
