"""What the test server answers: a pure function of the request text and its directives.

Replies are derived from a sha256 of the prompt, so the same prompt gets the same answer across
processes, restarts and retries. Prompt directives (anywhere in any message; the last one of a
kind wins): ``[[reply: TEXT]]`` (TEXT may span lines), ``[[fault: KIND]]``, ``[[fault-once:
KIND]]`` (only the first attempt of that exact prompt), ``[[latency: SECONDS]]`` and
``[[finish: REASON]]`` (the finish_reason to report, e.g. ``length`` for a reply cut off by
the token limit) and ``[[echo: headers]]`` (the reply is the request's headers as JSON, as a
careless proxy might send back).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from functools import lru_cache
from typing import Any

from flowkit.testing import judge
from flowkit.testing.config import FAULT_KINDS
from flowkit.testing.faults import ApiError

FINISH_REASONS = ("stop", "length", "content_filter")
_DIRECTIVE = re.compile(r"\[\[\s*(reply|fault-once|fault|latency|finish|echo)\s*:(.*?)\]\]", re.S)
_WORD = re.compile(r"\S+")
_TOKEN = re.compile(r"\s*\S+|\s+")
_DIGIT = re.compile(r"(?<![\w.])([0-9])(?![\w.])")
_FEATURE = re.compile(r"\w+")


def prompt_hash(messages: list[dict[str, Any]]) -> str:
    """The key a chat prompt is scored, counted and fault-tracked by (sha256 of role: content)."""
    return sha(messages_text(messages))


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: only the text counts
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def messages_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(f"{m.get('role')}: {content_text(m.get('content'))}" for m in messages)


def embedding_inputs(raw: Any) -> list[str]:
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        if all(isinstance(item, int) for item in raw):  # one pre-tokenised input
            return [" ".join(map(str, raw))]
        if all(isinstance(item, str) for item in raw):
            return list(raw)
        if all(isinstance(item, list) for item in raw):
            return [" ".join(map(str, item)) for item in raw]
    raise ApiError(400, "'input' must be a string, a non-empty list of strings, or token lists")


def directives(text: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, raw in _DIRECTIVE.findall(text):
        value = raw.strip()
        if name == "latency":
            try:
                found[name] = max(float(value), 0.0)
            except ValueError:
                raise ApiError(400, f"bad [[latency: {value}]]: expected seconds") from None
        elif name.startswith("fault"):
            if value not in FAULT_KINDS:
                raise ApiError(
                    400, f"bad [[{name}: {value}]]: kind must be one of {', '.join(FAULT_KINDS)}"
                )
            found[name] = value
        elif name == "echo":
            if value != "headers":
                raise ApiError(400, f"bad [[echo: {value}]]: only [[echo: headers]] is known")
            found[name] = value
        elif name == "finish":
            if value not in FINISH_REASONS:
                raise ApiError(
                    400,
                    f"bad [[finish: {value}]]: reason must be one of {', '.join(FINISH_REASONS)}",
                )
            found[name] = value
        else:
            found[name] = value
    return found


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def score_of(digest: str) -> int:
    return int(digest[:8], 16) % 5 + 1


def default_reply(
    body: dict[str, Any], score: int, key: str, messages: list[dict[str, Any]] | None = None
) -> str:
    """The unscripted reply: the offline judge's answer in the form the prompt asks for, or,
    for a prompt that is no judge prompt, ``Score: N`` with N from the prompt's hash."""
    turns = [(str(m.get("role")), content_text(m.get("content"))) for m in messages or ()]
    answer = judge.reply(body, turns, score) if turns else None
    if answer is not None:
        return answer
    response_format = body.get("response_format") or {}
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    reason = f"deterministic reply from the flowkit test server (prompt {key[:8]})"
    if turns and kind == "json_schema":
        verdict = judge.Verdict(*judge.split(turns))
        score, reason = (verdict.score, verdict.why) if verdict.found else (score, reason)
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema") or {}
        return json.dumps(_from_schema(schema, schema, score, reason))
    if kind == "json_object":
        return json.dumps({"score": score, "reason": reason})
    return f"Score: {score}"


def _from_schema(
    schema: dict[str, Any], root: dict[str, Any], score: int, reason: str, depth: int = 0
) -> Any:
    """Some value that fits a JSON schema, so structured-output parsing works offline."""
    if depth > 8:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _from_schema(target, root, score, reason, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        options = [s for s in schema.get(key, []) if s.get("type") != "null"]
        if options:
            return _from_schema(options[0], root, score, reason, depth + 1)
    if schema.get("enum"):
        return schema["enum"][(score - 1) % len(schema["enum"])]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        return {
            name: _from_schema(sub, root, score, reason, depth + 1)
            for name, sub in (schema.get("properties") or {}).items()
        }
    if kind == "array":
        return [_from_schema(schema.get("items") or {}, root, score, reason, depth + 1)]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", score), schema.get("maximum", score)
        value = min(max(score, low), high)
        return float(value) if kind == "number" else int(value)
    return {"boolean": score >= 3, "null": None}.get(kind, reason)


def truncate(content: str, limit: int | None) -> tuple[str, bool]:
    if limit is None:
        return content, False
    for count, match in enumerate(_WORD.finditer(content), start=1):
        if count == limit:
            cut = content[: match.end()]
            return cut, cut != content.rstrip()
    return content, False


def logprobs(content: str, fallback_score: int, top: int) -> dict[str, Any]:
    """A digit distribution peaked at the reply's score, for logprob-weighted judges."""
    found = _DIGIT.search(content)
    score = int(found.group(1)) if found else fallback_score
    weights = {str(d): math.exp(-2.0 * abs(d - score)) for d in range(10)}
    total = sum(weights.values())
    digits = sorted(
        ((d, math.log(w / total)) for d, w in weights.items()), key=lambda pair: (-pair[1], pair[0])
    )
    entries = []
    for index, token in enumerate(_TOKEN.findall(content) or [""]):
        bare = token.strip()
        if index == 0 or bare == str(score):
            prefix = token[: len(token) - len(token.lstrip())]
            options = [(prefix + d, lp) for d, lp in digits]
            logprob = dict(digits).get(bare, -0.01)
        else:
            logprob = -0.001 * (1 + index % 7)
            options = [(token, logprob)]
        entries.append(
            {
                "token": token,
                "logprob": logprob,
                "bytes": list(token.encode()),
                "top_logprobs": [
                    {"token": t, "logprob": lp, "bytes": list(t.encode())}
                    for t, lp in options[:top]
                ],
            }
        )
    return {"content": entries, "refusal": None}


@lru_cache(maxsize=1 << 16)
def _slots(word: str, dim: int) -> tuple[tuple[int, float], ...]:
    digest = hashlib.blake2b(word.encode(), digest_size=16).digest()
    return tuple(
        (int.from_bytes(digest[i : i + 4], "little") % dim, 1.0 if digest[i + 4] & 1 else -1.0)
        for i in (0, 8)
    )


def embedding(text: str, dim: int) -> list[float]:
    """Hashed bag of words: shared words mean shared slots, hence higher cosine similarity."""
    vector = [0.0] * dim
    for word in _FEATURE.findall(text.lower()) or [""]:
        for slot, sign in _slots(word, dim):
            vector[slot] += sign
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


@lru_cache(maxsize=64)
def compile_rules(rules: tuple[tuple[str, str], ...]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(pattern), reply) for pattern, reply in rules]
