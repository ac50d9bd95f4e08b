"""Where model endpoints come from: environment, ``flowkit.yaml`` and the command line.

Sources are merged in a fixed order, later ones winning: environment variables, then the
project file ``flowkit.yaml``, then ``--model`` / ``--connection``.  A node that pins its
own ``model`` or ``connection`` beats all of them, because a judge node pinned to a strong
model must not silently change when the user swaps the model under test with ``--model``.

API keys are held as :class:`pydantic.SecretStr`, excluded from every dump and repr, and
never formatted into an error message: run records, caches and logs are shared freely.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from flowkit.errors import UsageError

PROJECT_FILE = "flowkit.yaml"
OPENAI_PUBLIC_URL = "https://api.openai.com/v1"

_HOW_TO_CONFIGURE = """ways to configure one:
    - environment: OPENAI_API_KEY (and OPENAI_BASE_URL for another server), or \
AZURE_OPENAI_ENDPOINT + AZURE_OPENAI_API_KEY + OPENAI_API_VERSION; FLOWKIT_MODEL=<model>
    - flowkit.yaml in the project directory: default_model, default_connection, connections
    - the command line: --model <model> [--connection <name>]"""


class Limits(BaseModel):
    """How hard the scheduler may drive one endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(16, ge=1)
    """Most requests in flight at once; a connection that does not set it takes the run's
    ``--concurrency``."""
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

    def secrets(self) -> list[str]:
        """Every credential this endpoint sends: the key, and a password in the URL (also as
        the Basic Authorization token httpx makes of it). Masked wherever text is recorded."""
        found = [self.api_key.get_secret_value()] if self.api_key else []
        parts = urlsplit(self.url)
        if parts.password:
            user, password = unquote(parts.username or ""), unquote(parts.password)
            found += [password, base64.b64encode(f"{user}:{password}".encode()).decode()]
        return [s for s in found if len(s) >= 4]

    def fingerprint(self) -> dict[str, str | None]:
        """What identifies the server for cache keys and run records; never holds a secret."""
        return {
            "kind": self.kind,
            "url": redact_url(self.url),
            "deployment": self.deployment,
            "api_version": self.api_version,
        }

    def identity(self) -> tuple[str, ...]:
        """Process-local key for sharing clients and schedulers across nodes and rows.

        The model is left out so every node on one connection shares one client and one
        scheduler; a digest of the key is included so two settings objects with different
        keys for the same URL (tests, multi-tenant tools) never share a client.
        """
        secret = self.api_key.get_secret_value() if self.api_key else ""
        digest = hashlib.sha256(secret.encode()).hexdigest()[:16]
        return (
            self.connection,
            self.kind,
            self.url,
            self.api_version or "",
            self.deployment or "",
            digest,
            self.limits.model_dump_json(),
        )


DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
"""The embedding model when nothing names one (what embedding_similarity pinned before)."""


def redact_url(url: str) -> str:
    """``url`` with any password in it replaced by ****."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:****@{host}"))


class Settings(BaseModel):
    """The merged configuration; ask it for endpoints with :meth:`resolve` / :meth:`check`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_model: str | None = None
    """Model for nodes that pin none (FLOWKIT_MODEL < flowkit.yaml < --model)."""
    default_embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """Model for embedding nodes that pin none (FLOWKIT_EMBEDDING_MODEL < flowkit.yaml <
    --embedding-model); a chat model would be refused by an embeddings endpoint."""
    default_connection: str | None = None
    """Connection for nodes that pin none (environment < flowkit.yaml < --connection)."""
    connections: dict[str, Connection] = Field(default_factory=dict)
    """Every known connection, environment-derived ones first."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """User prices from flowkit.yaml (the built-in table lives in flowkit.llm.usage)."""
    project_file: str | None = None
    """Path of the flowkit.yaml that was read, for messages."""
    project_dir: str | None = None
    """Directory searched for flowkit.yaml, for messages."""

    def _project_note(self) -> str:
        if self.project_file:
            return f"{self.project_file} read"
        return f"no {PROJECT_FILE} in {self.project_dir or 'the current directory'}"

    def resolve(
        self, node_connection: str | None = None, node_model: str | None = None
    ) -> Endpoint:
        """The endpoint and model for one llm node.

        Precedence: the node's own ``connection``/``model`` beats ``--connection``/``--model``,
        which beat flowkit.yaml's defaults, which beat the environment.  Raises UsageError
        naming what is missing and how to configure it.
        """
        return self._resolve("an llm node", node_connection, node_model)

    def check(
        self,
        flow_name: str,
        node_name: str,
        connection: str | None,
        model: str | None,
        concurrency: int | None = None,
    ) -> Endpoint:
        """Validate one node's model configuration before any row runs; returns the endpoint.

        ``concurrency`` is the run's: it becomes the endpoint's in-flight limit when the
        connection sets none, and a note is logged when the connection sets another.
        """
        return self._resolve(
            f"flow '{flow_name}' node '{node_name}'", connection, model, concurrency
        )

    def check_embedding(
        self,
        flow_name: str,
        node_name: str,
        connection: str | None,
        model: str | None,
        concurrency: int | None = None,
    ) -> Endpoint:
        """:meth:`check` for an embedding node, whose fallback is the embedding model."""
        return self.check(
            flow_name, node_name, connection, model or self.default_embedding_model, concurrency
        )

    def _resolve(
        self,
        who: str,
        node_connection: str | None,
        node_model: str | None,
        run_concurrency: int | None = None,
    ) -> Endpoint:
        name = node_connection or self.default_connection
        if name is None and len(self.connections) == 1:
            name = next(iter(self.connections))
        if name is None:
            if self.connections:
                known = ", ".join(sorted(self.connections))
                raise UsageError(
                    f"{who} needs a model connection, but several are defined ({known}) "
                    "and none is the default.\n  set default_connection in flowkit.yaml, "
                    "pass --connection <name>, or pin `connection:` on the node"
                )
            raise UsageError(
                f"{who} needs a model, but no model connection is configured (no "
                "OPENAI_API_KEY, OPENAI_BASE_URL or AZURE_OPENAI_ENDPOINT in the environment; "
                f"{self._project_note()}).\n  {_HOW_TO_CONFIGURE}"
            )
        conn = self.connections.get(name)
        if conn is None:
            known = ", ".join(sorted(self.connections)) or "none"
            raise UsageError(
                f"{who} uses connection '{name}', which is not defined (known: {known}; "
                f"{self._project_note()}).\n  {_HOW_TO_CONFIGURE}"
            )
        model = node_model or self.default_model
        if model is None and conn.type == "azure" and conn.deployment:
            model = conn.deployment
        if not model:
            raise UsageError(
                f"{who} needs a model, but none is set: the node pins no `model:` and there "
                f"is no default model for connection '{name}'.\n  {_HOW_TO_CONFIGURE}\n"
                "    - or pin `model:` on the node"
            )
        if conn.needs_key() and conn.api_key is None:
            raise UsageError(
                f"{who} uses connection '{name}', which needs an API key, but "
                f"${conn.key_env()} is not set (or set api_key_env in flowkit.yaml)"
            )
        if conn.type == "azure":
            missing = [f for f in ("azure_endpoint", "api_version") if not getattr(conn, f)]
            if missing:
                raise UsageError(
                    f"{who} uses Azure connection '{name}', which lacks {' and '.join(missing)} "
                    "(set it in flowkit.yaml, or AZURE_OPENAI_ENDPOINT / OPENAI_API_VERSION)"
                )
        limits = conn.limits()
        if run_concurrency is not None:
            if "concurrency" not in conn.model_fields_set:
                limits = limits.model_copy(update={"concurrency": run_concurrency})
            elif conn.concurrency != run_concurrency:
                _note_once(
                    f"connection '{name}' allows {conn.concurrency} requests in flight "
                    f"(its concurrency setting); the run's --concurrency is {run_concurrency}, "
                    f"so at most {min(conn.concurrency, run_concurrency)} of its rows wait "
                    "on it at once"
                )
        return Endpoint(
            connection=name,
            kind=conn.type,
            model=model,
            base_url=(conn.base_url or OPENAI_PUBLIC_URL) if conn.type == "openai" else None,
            azure_endpoint=conn.azure_endpoint if conn.type == "azure" else None,
            api_version=conn.api_version if conn.type == "azure" else None,
            deployment=conn.deployment if conn.type == "azure" else None,
            limits=limits,
            api_key=conn.api_key,
        )


_noted: set[str] = set()


def _note_once(message: str) -> None:
    """Say it at the start of the run (once per process, however many nodes share it).

    Logged at WARNING on ``flowkit.llm``: with no logging set up, Python prints it to stderr.
    """
    if message not in _noted:
        _noted.add(message)
        logging.getLogger("flowkit.llm").warning("note: %s", message)


def _env_connections(env: Mapping[str, str]) -> dict[str, Connection]:
    """Connections implied by the standard OpenAI / Azure variables, named ``openai``/``azure``."""
    found: dict[str, Connection] = {}
    if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
        found["openai"] = Connection(type="openai", base_url=env.get("OPENAI_BASE_URL") or None)
    if env.get("AZURE_OPENAI_ENDPOINT"):
        found["azure"] = Connection(type="azure", azure_endpoint=env["AZURE_OPENAI_ENDPOINT"])
    return found


def _with_secrets(conn: Connection, env: Mapping[str, str]) -> Connection:
    """Fill in the key from the environment and the Azure API version default."""
    update: dict[str, object] = {}
    if conn.api_key is None and env.get(conn.key_env()):
        update["api_key"] = SecretStr(env[conn.key_env()])
    if conn.type == "azure" and not conn.api_version and env.get("OPENAI_API_VERSION"):
        update["api_version"] = env["OPENAI_API_VERSION"]
    return conn.model_copy(update=update) if update else conn


def load_settings(
    project_dir: str | Path | None = None,
    model: str | None = None,
    connection: str | None = None,
    env: Mapping[str, str] = os.environ,
    embedding_model: str | None = None,
) -> Settings:
    """Merge environment, ``<project_dir or cwd>/flowkit.yaml`` and CLI overrides.

    Nothing is checked for completeness here: a flow without llm nodes needs no model, so
    missing pieces are reported by :meth:`Settings.check` for the node that needs them.
    """
    connections = _env_connections(env)
    env_default = next(iter(connections), None)
    default_model = env.get("FLOWKIT_MODEL") or None
    embedding = env.get("FLOWKIT_EMBEDDING_MODEL") or DEFAULT_EMBEDDING_MODEL
    default_connection = env_default
    prices: dict[str, Price] = {}
    project_file: str | None = None

    folder = Path(project_dir) if project_dir is not None else Path.cwd()
    path = folder / PROJECT_FILE
    if path.is_file():
        from flowkit.llm.projectfile import read_project_file  # it builds on this module

        spec = read_project_file(path)
        project_file = str(path)
        connections.update(spec.connections)
        prices = dict(spec.prices)
        default_model = spec.default_model or default_model
        embedding = spec.default_embedding_model or embedding
        if spec.default_connection:
            default_connection = spec.default_connection
        elif len(spec.connections) == 1:
            default_connection = next(iter(spec.connections))

    return Settings(
        default_model=model or default_model,
        default_embedding_model=embedding_model or embedding,
        default_connection=connection or default_connection,
        connections={name: _with_secrets(c, env) for name, c in connections.items()},
        prices=prices,
        project_file=project_file,
        project_dir=str(folder),
    )
