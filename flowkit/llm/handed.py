"""The model settings a scale-out worker runs with: the driver's, handed over (``leases``).

A worker resolves no endpoint of its own: one whose environment or ``flowkit.yaml`` named
another server would send the run's requests there (measured: a Ray cluster started elsewhere
sent all 300 to the endpoint in its own environment, and the run said "completed"). It takes
the driver's resolved connections, addresses, models and limits; only keys are its own, from
its environment (or its own ``flowkit.yaml`` for the same address), because keys never travel.
A worker whose own configuration names another address for one of the driver's connections
refuses to run, naming both; one whose configuration names none (a key alone) takes the
driver's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from flowkit.errors import UsageError
from flowkit.llm.config import Settings, _with_secrets
from flowkit.llm.endpoint import OPENAI_PUBLIC_URL, Connection, redact_url


def _address(conn: Connection) -> tuple[str, ...]:
    """Where a connection's requests go (what a provider's quota is counted by, less the key)."""
    url = conn.azure_endpoint if conn.type == "azure" else conn.base_url or OPENAI_PUBLIC_URL
    return (conn.type, url or "", conn.api_version or "", conn.deployment or "")


def _said(conn: Connection) -> str:
    kind, url, version, deployment = _address(conn)
    extra = "".join(
        f", {k} {v}" for k, v in (("api version", version), ("deployment", deployment)) if v
    )
    return f"{redact_url(url)} ({kind}{extra})"


def worker_settings(
    driver: Mapping[str, Any], own: Settings | None, env: Mapping[str, str] = os.environ
) -> Settings:
    """The driver's settings (``Settings.model_dump``, without keys) with this worker's keys.

    ``own`` is what this worker resolves by itself (its environment and flowkit.yaml), None if
    it could not load any. Raises UsageError when it names another address for one of the
    driver's connections.
    """
    settings = Settings.model_validate(dict(driver))
    mine = own.connections if own is not None else {}
    connections = {}
    for name, conn in settings.connections.items():
        found = mine.get(name)
        # A worker's own connection that names no server (a key alone, for the public API)
        # says nothing against the driver's address: it is only where the key comes from.
        named = found is not None and (found.type == "azure" or found.base_url is not None)
        if found is not None and named and _address(found) != _address(conn):
            raise UsageError(
                f"worker on {socket.gethostname()} resolves connection '{name}' to "
                f"{_said(found)}, but the driver's run uses {_said(conn)}; refusing to run "
                "against another endpoint",
                hint="give the workers the driver's OPENAI_BASE_URL / AZURE_OPENAI_ENDPOINT "
                "and flowkit.yaml (or none: they take the driver's)",
            )
        if found is not None and found.api_key is not None:
            conn = conn.model_copy(update={"api_key": found.api_key})
        connections[name] = _with_secrets(conn, env)
    return settings.model_copy(update={"connections": connections})
