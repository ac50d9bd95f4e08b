"""Where endpoints come from: environment, flowkit.yaml, CLI; and how secrets stay secret."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from flowkit.errors import UsageError
from flowkit.llm.config import load_settings
from flowkit.llm.endpoint import OPENAI_PUBLIC_URL, Connection

SECRET = "sk-test-DO-NOT-LEAK-1234567890"

PROJECT = """\
default_model: gpt-4o-mini
default_connection: local
connections:
  local: {type: openai, base_url: "http://127.0.0.1:8000/v1", api_key_env: LOCAL_KEY,
          rpm: 600, tpm: 100000, concurrency: 32, timeout: 60, max_retries: 6}
  azure: {type: azure, azure_endpoint: "https://x.openai.azure.com", api_version: 2024-06-01,
          api_key_env: AZURE_OPENAI_API_KEY, deployment: gpt4o}
prices:
  my-model: {input: 0.5, output: 1.5}
"""


def project(tmp_path: Path, text: str = PROJECT) -> Path:
    (tmp_path / "flowkit.yaml").write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


def test_environment_only(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": SECRET, "FLOWKIT_MODEL": "gpt-4o"}
    endpoint = load_settings(tmp_path, env=env).resolve()
    assert endpoint.connection == "openai"
    assert endpoint.kind == "openai"
    assert endpoint.base_url == OPENAI_PUBLIC_URL
    assert endpoint.model == "gpt-4o"
    assert endpoint.api_key is not None
    assert endpoint.api_key.get_secret_value() == SECRET


def test_environment_base_url_needs_no_key(tmp_path: Path) -> None:
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "FLOWKIT_MODEL": "llama"}
    endpoint = load_settings(tmp_path, env=env).resolve()
    assert endpoint.base_url == "http://127.0.0.1:9/v1"
    assert endpoint.api_key is None


def test_environment_azure(tmp_path: Path) -> None:
    env = {
        "AZURE_OPENAI_ENDPOINT": "https://res.openai.azure.com",
        "AZURE_OPENAI_API_KEY": SECRET,
        "OPENAI_API_VERSION": "2024-06-01",
        "FLOWKIT_MODEL": "gpt-4o",
    }
    endpoint = load_settings(tmp_path, env=env).resolve()
    assert endpoint.kind == "azure"
    assert endpoint.azure_endpoint == "https://res.openai.azure.com"
    assert endpoint.api_version == "2024-06-01"
    assert endpoint.url == "https://res.openai.azure.com"
    assert endpoint.deployment is None  # the model name is the deployment
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == SECRET


def test_project_file_connections(tmp_path: Path) -> None:
    env = {"LOCAL_KEY": SECRET, "AZURE_OPENAI_API_KEY": "az-" + SECRET}
    settings = load_settings(project(tmp_path), env=env)
    local = settings.resolve()
    assert (local.connection, local.kind, local.model) == ("local", "openai", "gpt-4o-mini")
    assert local.base_url == "http://127.0.0.1:8000/v1"
    assert local.limits.rpm == 600
    assert local.limits.tpm == 100000
    assert local.limits.concurrency == 32
    assert local.limits.max_retries == 6
    assert local.api_key is not None and local.api_key.get_secret_value() == SECRET

    azure = settings.resolve("azure")
    assert azure.kind == "azure"
    assert azure.api_version == "2024-06-01"  # an unquoted YAML date, kept as text
    assert azure.deployment == "gpt4o"
    assert azure.model == "gpt-4o-mini"
    assert settings.prices["my-model"].output == 1.5


def test_project_file_beats_environment(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": SECRET, "FLOWKIT_MODEL": "env-model", "LOCAL_KEY": "k"}
    settings = load_settings(project(tmp_path), env=env)
    assert settings.default_model == "gpt-4o-mini"
    assert settings.default_connection == "local"
    assert set(settings.connections) == {"openai", "local", "azure"}
    assert settings.resolve("openai").model == "gpt-4o-mini"


def test_cli_overrides_defaults_but_not_node_pins(tmp_path: Path) -> None:
    env = {"LOCAL_KEY": "k", "AZURE_OPENAI_API_KEY": "k2"}
    settings = load_settings(project(tmp_path), model="cli-model", connection="azure", env=env)
    unpinned = settings.resolve()
    assert (unpinned.connection, unpinned.model) == ("azure", "cli-model")
    pinned = settings.resolve("local", "judge-model")
    assert (pinned.connection, pinned.model) == ("local", "judge-model")


def test_single_project_connection_is_the_default(tmp_path: Path) -> None:
    text = """\
    connections:
      only: {base_url: "http://127.0.0.1:1/v1"}
    """
    settings = load_settings(project(tmp_path, text), model="m", env={"OPENAI_API_KEY": "x"})
    assert settings.resolve().connection == "only"


MISSING_EVERYTHING = """\
flow 'qa' node 'answer' needs a model, but no model connection is configured (no \
OPENAI_API_KEY, OPENAI_BASE_URL or AZURE_OPENAI_ENDPOINT in the environment; no flowkit.yaml \
in {dir}).
  ways to configure one:
    - environment: OPENAI_API_KEY (and OPENAI_BASE_URL for another server), or \
AZURE_OPENAI_ENDPOINT + AZURE_OPENAI_API_KEY + OPENAI_API_VERSION; FLOWKIT_MODEL=<model>
    - flowkit.yaml in the project directory: default_model, default_connection, connections
    - the command line: --model <model> [--connection <name>]"""

MISSING_MODEL = """\
flow 'qa' node 'answer' needs a model, but none is set: the node pins no `model:` and there \
is no default model for connection 'openai'.
  ways to configure one:
    - environment: OPENAI_API_KEY (and OPENAI_BASE_URL for another server), or \
AZURE_OPENAI_ENDPOINT + AZURE_OPENAI_API_KEY + OPENAI_API_VERSION; FLOWKIT_MODEL=<model>
    - flowkit.yaml in the project directory: default_model, default_connection, connections
    - the command line: --model <model> [--connection <name>]
    - or pin `model:` on the node"""


def test_missing_configuration_message(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_settings(tmp_path, env={}).check("qa", "answer", None, None)
    assert str(caught.value) == MISSING_EVERYTHING.format(dir=tmp_path)
    assert caught.value.exit_code == 2


def test_missing_model_message(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, env={"OPENAI_API_KEY": SECRET})
    with pytest.raises(UsageError) as caught:
        settings.check("qa", "answer", None, None)
    assert str(caught.value) == MISSING_MODEL
    assert settings.check("qa", "answer", None, "pinned").model == "pinned"


def test_missing_key_unknown_connection_and_azure_gaps(tmp_path: Path) -> None:
    settings = load_settings(project(tmp_path), env={})
    with pytest.raises(
        UsageError,
        match=r"connection 'azure', which needs an API key, but "
        r"\$AZURE_OPENAI_API_KEY is not set",
    ):
        settings.check("qa", "judge", "azure", None)
    with pytest.raises(
        UsageError,
        match=r"uses connection 'nope', which is not defined "
        r"\(known: azure, local;",
    ):
        settings.check("qa", "judge", "nope", None)
    assert settings.check("qa", "judge", "local", None).api_key is None  # local: key optional
    azure_env = {"AZURE_OPENAI_ENDPOINT": "https://r", "AZURE_OPENAI_API_KEY": "k"}
    with pytest.raises(UsageError, match="lacks api_version"):
        load_settings(tmp_path / "none", model="m", env=azure_env).resolve()


def test_several_connections_and_no_default(tmp_path: Path) -> None:
    text = """\
    default_model: m
    connections:
      a: {base_url: "http://127.0.0.1:1/v1"}
      b: {base_url: "http://127.0.0.1:2/v1"}
    """
    with pytest.raises(UsageError, match=r"several are defined \(a, b\)"):
        load_settings(project(tmp_path, text), env={}).check("f", "n", None, None)


def test_bad_project_files_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"flowkit.yaml:\d+: not valid YAML \(.+\)"):
        load_settings(project(tmp_path, "a: 1\nb: [\n"), env={})
    with pytest.raises(UsageError, match=r"flowkit.yaml:2: connections.x.colour: unknown key"):
        load_settings(project(tmp_path, "connections:\n  x: {colour: red}\n"), env={})
    with pytest.raises(UsageError, match="expected a mapping"):
        load_settings(project(tmp_path, "- 1\n"), env={})


def test_project_file_errors_name_the_line_and_a_near_key(tmp_path: Path) -> None:
    text = "default_model: m\nconnections:\n  local:\n    type: openai\n    base_ur: http://x\n"
    path = project(tmp_path, text + "default_modle: y\n")
    with pytest.raises(UsageError) as caught:
        load_settings(path, env={})
    assert str(caught.value).splitlines() == [
        "2 problems in flowkit.yaml",
        f"{path / 'flowkit.yaml'}:5: connections.local.base_ur: unknown key 'base_ur' (did you "
        "mean 'base_url'?); known keys: api_key, api_key_env, api_version, azure_endpoint, "
        "backoff_base, backoff_max, base_url, batch, batch_max_requests, concurrency, "
        "deployment, max_reply_bytes, max_retries, rpm, slow_start, timeout, token_charge, tpm, "
        "type",
        f"{path / 'flowkit.yaml'}:6: default_modle: unknown key 'default_modle' (did you mean "
        "'default_model'?); known keys: batch_prices, connections, default_connection, "
        "default_embedding_model, default_model, prices",
    ]


def test_validation_errors_do_not_quote_secrets(tmp_path: Path) -> None:
    text = f"connections:\n  x: {{api_key: [{SECRET}], rpm: {SECRET}}}\n"
    with pytest.raises(UsageError) as caught:
        load_settings(project(tmp_path, text), env={})
    assert SECRET not in str(caught.value)
    assert "connections.x.api_key" in str(caught.value)


def test_secrets_never_leak(tmp_path: Path) -> None:
    text = f"""\
    default_model: m
    connections:
      lit: {{base_url: "https://api.openai.com/v1", api_key: "{SECRET}"}}
    """
    settings = load_settings(project(tmp_path, text), env={"OPENAI_API_KEY": SECRET})
    endpoint = settings.resolve("lit")
    assert endpoint.api_key is not None and endpoint.api_key.get_secret_value() == SECRET
    conn = settings.connections["lit"]
    for thing in (settings, conn, endpoint, endpoint.limits):
        for text_form in (
            repr(thing),
            str(thing),
            thing.model_dump_json(),
            str(thing.model_dump()),
        ):
            assert SECRET not in text_form
    assert "api_key" not in endpoint.model_dump()
    assert "api_key" not in conn.model_dump()
    assert SECRET not in str(endpoint.fingerprint())
    assert SECRET not in repr(endpoint.identity())
    # Errors raised with a key configured do not mention it either.
    for call in (
        lambda: settings.check("f", "n", "missing", None),
        lambda: load_settings(tmp_path / "x", env={"OPENAI_API_KEY": SECRET}).check(
            "f", "n", None, None
        ),
    ):
        with pytest.raises(UsageError) as caught:
            call()
        assert SECRET not in str(caught.value)


def test_connection_defaults() -> None:
    conn = Connection()
    assert conn.type == "openai"
    assert conn.key_env() == "OPENAI_API_KEY"
    assert conn.needs_key()
    assert not Connection(base_url="http://127.0.0.1:1/v1").needs_key()
    assert Connection(type="azure").key_env() == "AZURE_OPENAI_API_KEY"
    limits = Connection(rpm=5, backoff_base=0.01).limits()
    assert (limits.rpm, limits.backoff_base, limits.concurrency) == (5, 0.01, 16)
