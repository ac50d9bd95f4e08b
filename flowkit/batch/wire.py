"""The batch API's file formats: request lines in, output and error lines back.

A call's ``custom_id`` is a digest of its URL and request body: the same request from two rows
(or from a resumed run) is the same line, asked and paid once, and a run that restarts can tell
from a recorded batch which of its calls the batch holds without keeping the calls themselves.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

CHAT_URL: Final = "/v1/chat/completions"
MAX_REQUESTS = 50_000
"""Requests per batch input file (OpenAI's limit; Azure's global batch allows more)."""
MAX_BYTES = 200 * 2**20
"""Bytes per batch input file (OpenAI's limit)."""


def call_id(url: str, body: dict[str, Any]) -> str:
    """The custom_id of a request: a digest of everything sent."""
    text = json.dumps([url, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "fk-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def request_line(custom_id: str, url: str, body: dict[str, Any]) -> bytes:
    """One line of an input file."""
    line = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def split(
    lines: list[tuple[str, bytes]], max_requests: int = MAX_REQUESTS, max_bytes: int = MAX_BYTES
) -> Iterator[list[tuple[str, bytes]]]:
    """``lines`` (custom_id, encoded line) cut into files within the provider's limits."""
    part: list[tuple[str, bytes]] = []
    size = 0
    for item in lines:
        if part and (len(part) >= max_requests or size + len(item[1]) > max_bytes):
            yield part
            part, size = [], 0
        part.append(item)
        size += len(item[1])
    if part:
        yield part


@dataclass(frozen=True)
class Outcome:
    """What a batch says of one call: a reply body (status 200), or why there is none."""

    custom_id: str
    body: dict[str, Any] | None
    error: str | None
    final: bool = False
    """The request itself was refused (a 4xx other than 408, 409 and 429, as a bad parameter):
    asking again, in a batch or online, gets the same answer."""


def outcomes(text: str) -> Iterator[Outcome]:
    """The lines of an output or error file."""
    for raw in text.splitlines():
        if not raw.strip():
            continue
        line = json.loads(raw)
        custom_id = line.get("custom_id")
        response = line.get("response") or {}
        status = response.get("status_code")
        body = response.get("body")
        if status == 200 and isinstance(body, dict) and not line.get("error"):
            yield Outcome(custom_id, body, None)
            continue
        error = line.get("error") or (body or {}).get("error") or {}
        code = error.get("code") or (f"HTTP {status}" if status else "error")
        final = isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429)
        yield Outcome(custom_id, None, f"{code}: {error.get('message') or 'no message'}", final)
