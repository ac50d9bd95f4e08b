"""`promptflow.connections`: connection objects whose values come from flowkit's configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowkit.llm.endpoint import Endpoint


class _Connection:
    """A named connection: `configs` and `secrets`, readable as attributes and as a mapping."""

    TYPE = "custom"
    _endpoint: Endpoint
    """Set by ``_named`` on a connection from flowkit's configuration; the chat tools use it."""

    def __init__(
        self,
        configs: dict[str, Any] | None = None,
        secrets: dict[str, Any] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.configs = dict(configs or {})
        self.secrets = dict(secrets or {})
        self.configs.update({k: v for k, v in kwargs.items() if v is not None})
        self.type = self.TYPE

    @classmethod
    def _named(cls, name: str) -> _Connection:
        """The connection flowkit's configuration gives for ``name``."""
        from flowkit.pfcompat.connections import connection_values, endpoint_for

        endpoint = endpoint_for(name)
        values = connection_values(endpoint)
        conn = cls.__new__(cls)
        _Connection.__init__(conn, name=name, secrets={"api_key": values.pop("api_key")})
        conn.configs.update(values)
        if values["api_version"] is None and cls is AzureOpenAIConnection:
            conn.configs["api_version"] = "2024-02-01"  # the class's own default
        if endpoint.kind != "azure":
            conn.configs["base_url"] = values["api_base"]
        conn._endpoint = endpoint
        return conn

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        for part in ("secrets", "configs"):
            store = self.__dict__.get(part, {})
            if key in store:
                return store[key]
        raise AttributeError(key)

    def keys(self) -> list[str]:
        return [*self.configs, *self.secrets]

    def __getitem__(self, key: str) -> Any:
        return {**self.configs, **self.secrets}[key]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"  # never the key


class AzureOpenAIConnection(_Connection):
    TYPE = "azure_open_ai"

    def __init__(
        self,
        api_base: str | None = None,
        api_key: str | None = None,
        api_type: str = "azure",
        api_version: str = "2024-02-01",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            configs={"api_base": api_base, "api_type": api_type, "api_version": api_version},
            secrets={"api_key": api_key},
            **kwargs,
        )


class OpenAIConnection(_Connection):
    TYPE = "open_ai"

    def __init__(
        self,
        api_key: str | None = None,
        organization: str | None = None,
        base_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            configs={"organization": organization, "base_url": base_url, "api_base": base_url},
            secrets={"api_key": api_key},
            **kwargs,
        )


class CustomConnection(_Connection):
    TYPE = "custom"
