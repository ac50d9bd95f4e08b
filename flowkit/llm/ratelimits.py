"""The rate-limit headers OpenAI, Azure OpenAI and OpenAI-compatible gateways send on replies.

OpenAI documents ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``: limits and counts are
integers, resets are Go ``time.Duration`` strings (``1s``, ``6m0s``, ``20ms``; gateways such as
Groq send fractions like ``2m59.56s``). Azure sends only the ``remaining`` pair, and on some APIs
``-1`` for "unknown", which must not read as "nothing left". Variants with a
``_usage_based`` suffix exist; the plain names win when both are present.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# Longest unit first, so "ms" is never read as minutes followed by junk.
_UNITS = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ns": 1e-9,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|μs|ns|m|s)")


def parse_duration(text: str | None) -> float | None:
    """Seconds from a Go duration (``6m0s``, ``1.5s``, ``20ms``) or a bare number of seconds.

    Returns None for anything else (empty, negative, unknown units), so a malformed header is
    ignored rather than trusted.
    """
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    try:
        bare = float(text)
    except ValueError:
        pass
    else:
        return bare if bare >= 0 else None
    total, pos = 0.0, 0
    for match in _PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


# What a real endpoint can say, per minute (Azure's smallest quota is 1,000 tokens a minute; a
# day is the longest window a reset counts down). A value outside is a broken or hostile
# header: trusted, "limit-tokens: 1" stalls a run for hours and "1e999" overflows.
_BOUNDS = {
    "limit-requests": (1, 10**9),
    "limit-tokens": (1_000, 10**12),
    "remaining-requests": (0, 10**9),
    "remaining-tokens": (0, 10**12),
}
MAX_RESET = 86_400.0


def _count(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    if number == -1:  # Azure's -1 means "not reported"
        return None
    low, high = _BOUNDS[name]
    if not low <= number <= high:  # NaN and infinities included
        _ignored(name, value)
        return None
    return int(number)


def _reset(value: str | None, name: str) -> float | None:
    seconds = parse_duration(value)
    if seconds is not None and not seconds <= MAX_RESET:
        _ignored(name, value or "")
        return None
    return seconds


def _ignored(name: str, value: str) -> None:
    """Say once per run and header that a value was ignored (a run's notices, and the log)."""
    import logging

    from flowkit.llm.session import current_session

    session = current_session()
    if name in session.noted:
        return
    session.noted.add(name)
    message = (
        f"ignored the endpoint's x-ratelimit-{name}: {value.strip()[:40]!r} (not a plausible "
        "limit); the run paces by what it measures instead"
    )
    logging.getLogger("flowkit.llm").warning("note: %s", message)
    session.notes.append(message)


@dataclass(frozen=True)
class Quota:
    """One dimension (requests or tokens) of what a reply said about the endpoint's limit."""

    limit: int | None = None
    """The cap per minute, when the server says it."""
    remaining: int | None = None
    """What is left of the cap right now."""
    reset: float | None = None
    """Seconds until the cap is whole again."""

    @property
    def known(self) -> bool:
        """Whether the reply said anything at all about this dimension."""
        return self.limit is not None or self.remaining is not None or self.reset is not None


@dataclass(frozen=True)
class RateHeaders:
    """The request and token quotas a reply reported."""

    requests: Quota
    tokens: Quota

    @property
    def known(self) -> bool:
        """Whether the reply carried any rate-limit header."""
        return self.requests.known or self.tokens.known

    @property
    def exhausted(self) -> bool:
        """Whether the server says one of its budgets is spent (a 429 then means overload)."""
        return self.requests.remaining == 0 or self.tokens.remaining == 0


def _quota(headers: Mapping[str, str], what: str) -> Quota:
    def get(kind: str) -> str | None:
        name = f"x-ratelimit-{kind}-{what}"
        value = headers.get(name)
        return value if value is not None else headers.get(f"{name}_usage_based")

    return Quota(
        _count(get("limit"), f"limit-{what}"),
        _count(get("remaining"), f"remaining-{what}"),
        _reset(get("reset"), f"reset-{what}"),
    )


@dataclass
class Advertised:
    """What an endpoint's rate-limit headers said its limits are, as paces (per window)."""

    rpm: float | None = None
    """The request pace the headers set, or None."""
    tpm: float | None = None
    """The token pace the headers set, or None."""
    token_limit: int | None = None
    """The token limit as a header last stated it."""
    most_left: dict[str, int] = field(default_factory=lambda: {"rpm": 0, "tpm": 0})
    """The most ever left of each budget, where no limit is sent."""

    def learn(self, found: RateHeaders, margin: float) -> bool:
        """Take in a reply's headers, pacing at ``margin`` of a limit; whether a pace changed."""
        changed = False
        for quota, pace in ((found.requests, "rpm"), (found.tokens, "tpm")):
            limit = quota.limit
            if not limit and quota.remaining and quota.remaining > self.most_left[pace]:
                # Azure sends what is left of the minute's budget without the budget: it is at
                # least the most ever left, which the first reply shows within one request.
                self.most_left[pace] = limit = quota.remaining
            if limit and getattr(self, pace) != limit * margin:
                setattr(self, pace, limit * margin)
                changed = True
        if found.tokens.limit:
            self.token_limit = found.tokens.limit
        return changed


ANNOUNCING_HOSTS = (
    "api.openai.com",
    ".openai.azure.com",
    ".cognitiveservices.azure.com",
    ".services.ai.azure.com",
)
"""Hosts whose every reply carries rate-limit headers (OpenAI's API and Azure OpenAI's)."""


def announces_limits(url: str) -> bool:
    """Whether the endpoint at ``url`` is known to send its limits on every reply: its first
    reply says how fast the rest may go, so the first request is worth sending alone."""
    host = (urlsplit(url).hostname or "").lower()
    return any(host == h or (h.startswith(".") and host.endswith(h)) for h in ANNOUNCING_HOSTS)


def parse_rate_headers(headers: Mapping[str, str] | None) -> RateHeaders | None:
    """The rate-limit headers of a reply, or None when it carried none.

    ``headers`` may be an ``httpx.Headers`` (case-insensitive) or a plain dict.
    """
    if not headers:
        return None
    raw = getattr(headers, "raw", None)  # httpx's (name, value) byte pairs, as received
    if isinstance(raw, list):
        # One pass over the raw pairs: a dozen case-insensitive lookups on ``httpx.Headers``
        # each scan every header and re-detect its encoding (~4% of a judge call's CPU).
        lowered = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
    else:
        lowered = {k.lower(): v for k, v in headers.items()}
    if not any(name.startswith("x-ratelimit-") for name in lowered):
        return None
    found = RateHeaders(_quota(lowered, "requests"), _quota(lowered, "tokens"))
    return found if found.known else None


def format_duration(seconds: float) -> str:
    """The Go duration OpenAI would send for ``seconds`` (``6m0s``, ``1.5s``, ``20ms``)."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes >= 1 else text
