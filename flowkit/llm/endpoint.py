"""What one model endpoint is: a connection as configured (its limits and prices) and the
resolved :class:`Endpoint` a node calls, with its identity (what the client and scheduler caches
are keyed by) and its secrets. ``config`` assembles them from the environment, ``flowkit.yaml``
and the command line.

API keys are held as :class:`pydantic.SecretStr`, excluded from every dump and repr, and never
formatted into an error message: run records, caches and logs are shared freely.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import re
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from flowkit.llm.charging import TokenCharge, default_rule
from flowkit.llm.replies import MIN_CAP, default_cap

OPENAI_PUBLIC_URL = "https://api.openai.com/v1"

# A variable's name as people write them (upper case; lower case is legal but rare): anything
# else in ``api_key_env`` (mixed case, dashes, 40 random characters) is taken for a key.
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}|[a-z_][a-z0-9_]{0,31}")


def masked_secret(text: str) -> str:
    """``text`` with all but its first four characters hidden, and its length said: enough to
    recognise which key it was, never enough to use it."""
    return f"{text[:4]}… ({len(text)} characters)" if len(text) > 8 else "****"


class Limits(BaseModel):
    """How hard the scheduler may drive one endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(16, ge=1)
    """Most requests in flight at once to each model (each has its own scheduler); a
    connection that does not set it takes the run's ``--concurrency``."""
    rpm: int | None = Field(None, ge=1)
    """Requests-per-minute budget, or None for no budget."""
    tpm: int | None = Field(None, ge=1)
    """Tokens-per-minute budget (prompt + completion, estimated before sending), or None."""
    timeout: float = Field(60.0, gt=0)
    """Seconds one attempt may take before it is abandoned and retried."""
    max_retries: int = Field(6, ge=0)
    """Retries after the first attempt for 429s, 5xx, timeouts and connection errors."""
    backoff_base: float = Field(0.5, ge=0)
    """First backoff ceiling in seconds; it doubles per retry (full jitter below it)."""
    backoff_max: float = Field(30.0, ge=0)
    """Largest backoff ceiling in seconds."""
    batch_max_requests: int = Field(50_000, ge=1)
    """Requests per batch in batch mode (the provider's limit; OpenAI's is 50,000)."""
    max_reply_bytes: int = Field(default_factory=default_cap, ge=MIN_CAP)
    """Largest reply body read, compressed or decompressed (``replies``); a bigger one is a
    failed attempt. Defaults to $FLOWKIT_MAX_REPLY_BYTES, else 32 MiB."""
    token_charge: TokenCharge | None = None
    """How the endpoint charges a request to its ``tpm``: ``prompt_plus_max`` (prompt + the
    output cap × n, on arrival: Azure), ``max_of`` (the larger of the cap and characters / 4:
    OpenAI) or ``usage`` (the reply's usage); unset, ``max_of`` for the public OpenAI API and
    ``prompt_plus_max`` otherwise (see ``flowkit.llm.charging``)."""
    slow_start: bool | None = None
    """Send one request alone before any other, so its reply's rate-limit headers pace the
    rest: unset, only to OpenAI's and Azure's hosts (they send them); false never. Without
    headers a run opens at ``concurrency`` and overload 429s set a pace (``pacing``)."""


class Price(BaseModel):
    """USD per one million tokens for one model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    """USD per 1M prompt tokens."""
    output: float = Field(0.0, ge=0)
    """USD per 1M completion tokens (0 for embedding models)."""


class Connection(Limits):
    """One named endpoint as written in ``flowkit.yaml`` (or derived from the environment);
    its scheduler settings are the fields it shares with ``Limits``."""

    type: Literal["openai", "azure"] = "openai"
    """``openai`` for the OpenAI API and any OpenAI-compatible server, ``azure`` for Azure."""
    base_url: str | None = None
    """Server URL ending in ``/v1`` (openai type); unset means the public OpenAI API."""
    azure_endpoint: str | None = None
    """Resource URL such as ``https://x.openai.azure.com`` (azure type)."""
    batch: bool = False
    """Send llm calls to this connection through its batch API, as ``--batch`` does for all."""

    @field_validator("base_url", "azure_endpoint")
    @classmethod
    def _a_url(cls, value: str | None) -> str | None:
        """A URL typo must not send requests (and keys) elsewhere: an empty or unparsable one
        is refused, never replaced by the public OpenAI URL."""
        if value is None:
            return None
        if not value.strip():
            raise ValueError("is empty: give the server's URL, or leave the key out for OpenAI")
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{value!r} is not an http(s) URL; write it like 'http://localhost:8000/v1'"
            )
        return value.strip()

    api_version: str | None = None
    """Azure API version such as ``2024-06-01``; defaults to $OPENAI_API_VERSION."""
    deployment: str | None = None
    """Azure deployment every chat call goes to; empty means the model name is the deployment."""
    api_key_env: str | None = None
    """Environment variable holding the key (preferred over ``api_key``)."""
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)
    """Literal key; discouraged because project files get committed."""

    @field_validator("api_version", mode="before")
    @classmethod
    def _date_as_text(cls, value: object) -> object:
        """YAML reads an unquoted ``2024-06-01`` as a date; the API wants the text."""
        return value.isoformat() if isinstance(value, datetime.date) else value

    def key_env_is_a_name(self) -> bool:
        """Whether ``api_key_env`` reads as a variable's name, not as a key pasted in by
        mistake (which must then never be shown whole: :func:`masked_secret`)."""
        return bool(_ENV_NAME.fullmatch(self.key_env()))

    def key_env(self) -> str:
        """The variable the key is read from when no literal key is given."""
        if self.api_key_env:
            return self.api_key_env
        return "AZURE_OPENAI_API_KEY" if self.type == "azure" else "OPENAI_API_KEY"

    def needs_key(self) -> bool:
        """Hosted services reject keyless calls; local OpenAI-compatible servers usually don't."""
        return self.type == "azure" or not self.base_url or self.base_url == OPENAI_PUBLIC_URL

    def limits(self) -> Limits:
        """The scheduler settings of this connection."""
        return Limits(**self.model_dump(include=set(Limits.model_fields)))


class Endpoint(BaseModel):
    """A resolved connection plus the model to call: everything a request needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connection: str
    """Name of the connection this came from."""
    kind: Literal["openai", "azure"]
    """Which client class talks to it."""
    model: str
    """Model name to request (for Azure with a pinned deployment: a label for pricing)."""
    base_url: str | None = None
    """Server URL (openai kind)."""
    azure_endpoint: str | None = None
    """Resource URL (azure kind)."""
    api_version: str | None = None
    """Azure API version."""
    deployment: str | None = None
    """Azure deployment chat calls are routed to."""
    limits: Limits = Field(default_factory=Limits)
    """Scheduler settings."""
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)
    """The key; never dumped, never printed."""

    @property
    def url(self) -> str:
        """The server address, whichever kind this is."""
        return (self.azure_endpoint if self.kind == "azure" else self.base_url) or OPENAI_PUBLIC_URL

    @property
    def public_openai(self) -> bool:
        """Whether this is OpenAI's own API, however its URL is written (a trailing slash, the
        host's case: ``https://api.openai.com/v1/`` is OpenAI as much as the default is)."""
        if self.kind != "openai":
            return False
        return (urlsplit(self.url).hostname or "").lower() == "api.openai.com"

    def token_charge(self) -> TokenCharge:
        """The rule this endpoint charges requests to its token budget by."""
        rule = self.limits.token_charge
        return rule or default_rule(self.kind, self.public_openai)

    def secrets(self) -> list[str]:
        """Every credential this endpoint sends: the key, and a password in the URL (also as
        the Basic Authorization token httpx makes of it). Masked wherever text is recorded."""
        found = [self.api_key.get_secret_value()] if self.api_key else []
        parts = urlsplit(self.url)
        if parts.password:
            user, password = unquote(parts.username or ""), unquote(parts.password)
            found += [password, base64.b64encode(f"{user}:{password}".encode()).decode()]
        return [s for s in found if len(s) >= 4]

    def reached(self, model: str | None = None, *, chat: bool = True) -> dict[str, str]:
        """What identifies the model a request to this endpoint reaches (``model``, default
        the endpoint's): what enters the cache key of a node that calls it, and what a resume
        compares.

        The model name, and for a chat call to an Azure connection that pins a ``deployment``
        the deployment too: the request's path names it, so it, not the model label, decides
        which model answers (embedding calls name the model as their deployment). Never the
        address, key, timeouts, retries or limits: a cache survives moving between equivalent
        endpoints (docs/reference.md, "The cache"). An endpoint without a deployment gives the
        model alone, as keys had it before the deployment entered them, so existing caches stay
        valid.
        """
        found = {"model": model or self.model}
        if chat and self.deployment:
            found["deployment"] = self.deployment
        return found

    def fingerprint(self) -> dict[str, str | None]:
        """What identifies the server for cache keys and run records; never holds a secret."""
        return {
            "kind": self.kind,
            "url": redact_url(self.url),
            "deployment": self.deployment,
            "api_version": self.api_version,
        }

    def identity(self) -> tuple[str, ...]:
        """Process-local key for sharing a run's clients and schedulers across nodes and rows.

        The model is left out so every node on one connection shares one client (schedulers
        are per identity and model, ``session``); a digest of the key is included so two
        settings objects with different keys for the same URL (tests, multi-tenant tools) never
        share a client. The limits come last: ``memory`` keys what an endpoint took by the rest
        (and the model).
        """
        # Asked on every request: remembered per object (frozen, so the answer never changes;
        # not in the object itself, where ``model_copy`` would carry it to a changed copy).
        known = _identities.get(id(self))
        if known is not None and known[0] is self:
            return known[1]
        secret = self.api_key.get_secret_value() if self.api_key else ""
        digest = hashlib.sha256(secret.encode()).hexdigest()[:16]
        key = (
            self.connection,
            self.kind,
            self.url,
            self.api_version or "",
            self.deployment or "",
            digest,
            self.limits.model_dump_json(),
        )
        if len(_identities) >= 256:  # endpoints are few; a long-lived process may make many
            _identities.clear()
        _identities[id(self)] = (self, key)
        return key


_identities: dict[int, tuple[Endpoint, tuple[str, ...]]] = {}


DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
"""The embedding model when nothing names one (what embedding_similarity pinned before)."""


def redact_url(url: str) -> str:
    """``url`` with any password in it replaced by ****."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:****@{host}"))
