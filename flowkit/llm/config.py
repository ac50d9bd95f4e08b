"""Where model endpoints come from: environment, ``flowkit.yaml`` and the command line.

Sources are merged in a fixed order, later ones winning: environment variables, then the
project file ``flowkit.yaml``, then ``--model`` / ``--connection``.  A node that pins its
own ``model`` or ``connection`` beats all of them, because a judge node pinned to a strong
model must not silently change when the user swaps the model under test with ``--model``.

API keys are held as :class:`pydantic.SecretStr`, excluded from every dump and repr, and
never formatted into an error message: run records, caches and logs are shared freely.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from flowkit.errors import UsageError
from flowkit.llm.endpoint import (
    DEFAULT_EMBEDDING_MODEL,
    OPENAI_PUBLIC_URL,
    Connection,
    Endpoint,
    Price,
    masked_secret,
)

PROJECT_FILE = "flowkit.yaml"

_HOW_TO_CONFIGURE = """ways to configure one:
    - environment: OPENAI_API_KEY (and OPENAI_BASE_URL for another server), or \
AZURE_OPENAI_ENDPOINT + AZURE_OPENAI_API_KEY + OPENAI_API_VERSION; FLOWKIT_MODEL=<model>
    - flowkit.yaml in the project directory: default_model, default_connection, connections
    - the command line: --model <model> [--connection <name>]"""


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
    batch_prices: dict[str, Price] = Field(default_factory=dict)
    """User batch prices from flowkit.yaml (else half the price, ``usage.BATCH_SHARE``)."""
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
            start = f"{who} uses connection '{name}', which needs an API key, but"
            if not conn.key_env_is_a_name():
                raise UsageError(
                    f"{start} its api_key_env {masked_secret(conn.key_env())!r} is not the name "
                    "of an environment variable (a key pasted in by mistake? put the key in a "
                    "variable and give api_key_env that variable's name)"
                )
            raise UsageError(
                f"{start} ${conn.key_env()} is not set (or set api_key_env in flowkit.yaml)"
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


def _note_once(message: str) -> None:
    """Say it at the start of the run, once per session (``session``: the run's when the run
    checks its nodes inside it, else the process's default one), however many nodes share it.

    Logged at WARNING on ``flowkit.llm``: with no logging set up, Python prints it to stderr.
    """
    from flowkit.llm.session import current_session

    noted = current_session().noted
    if message not in noted:
        noted.add(message)
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
    from flowkit.llm.replies import env_problem

    if (problem := env_problem()) is not None:
        raise UsageError(problem)
    connections = _env_connections(env)
    env_default = next(iter(connections), None)
    default_model = env.get("FLOWKIT_MODEL") or None
    embedding = env.get("FLOWKIT_EMBEDDING_MODEL") or DEFAULT_EMBEDDING_MODEL
    default_connection = env_default
    prices: dict[str, Price] = {}
    batch_prices: dict[str, Price] = {}
    project_file: str | None = None

    folder = Path(project_dir) if project_dir is not None else Path.cwd()
    path = folder / PROJECT_FILE
    if path.is_file():
        from flowkit.llm.projectfile import read_project_file  # it builds on this module

        spec = read_project_file(path)
        project_file = str(path)
        connections.update(spec.connections)
        prices = dict(spec.prices)
        batch_prices = dict(spec.batch_prices)
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
        batch_prices=batch_prices,
        project_file=project_file,
        project_dir=str(folder),
    )
