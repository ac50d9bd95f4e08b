"""Where the openai SDK lacks a private name the short request path uses (``prepared``), a run
takes the SDK's public API, says so once, and gets the same outputs. Real HTTP to the local test
server; the name is taken off the SDK for the test, as a release that renames it would."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import openai
import openai._models
import pytest

import flowkit
from flowkit.llm import clients, hooks, prepared
from flowkit.llm.endpoint import Endpoint
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES


def _remove(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``name`` gone from every class of the SDK's async client that defines it."""
    owners = [c for c in openai.AsyncOpenAI.__mro__ if name in vars(c)]
    assert owners, name
    for owner in owners:
        monkeypatch.delattr(owner, name)


def _run(tmp_path: Path, tag: str) -> tuple[list[dict[str, Any]], list[str]]:
    result = flowkit.run(
        "groundedness",
        EXAMPLES / "qa.jsonl",
        cache_dir=tmp_path / f"cache-{tag}",
        runs_root=tmp_path / f"runs-{tag}",
    )
    rows = [{"status": r["status"], "outputs": r["outputs"]} for r in result.rows()]
    return rows, list(result.info.get("notices") or [])


def _notice(missing: str) -> str:
    return (
        f"openai {openai.__version__}: the SDK lacks {missing}; chat requests go through the "
        "SDK's public API (chat.completions.create), which costs more CPU per request"
    )


@pytest.mark.parametrize(
    ("missing", "remove"),
    [
        # The SDK's own success path needs neither, so it still works without them.
        (
            "_make_status_error_from_response",
            lambda m: _remove(m, "_make_status_error_from_response"),
        ),
        (
            "openai._models.FinalRequestOptions",
            lambda m: m.delattr(openai._models, "FinalRequestOptions"),
        ),
    ],
)
def test_a_missing_private_name_falls_back_to_the_public_api_with_one_notice(
    llm_server: LocalServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    missing: str,
    remove: Any,
) -> None:
    expected, notices = _run(tmp_path, "hooks")
    assert not any("public API" in n for n in notices)
    assert llm_server.stats()["chat_completions"] == len(expected)
    llm_server.reset()

    remove(monkeypatch)
    rows, notices = _run(tmp_path, "public")
    assert rows == expected
    assert [r["status"] for r in rows] == ["ok"] * len(rows)
    assert llm_server.stats()["chat_completions"] == len(rows)
    assert [n for n in notices if "public API" in n] == [_notice(missing)]


def _missing(llm_server: LocalServer) -> list[str]:
    """The hooks a fresh client of the test server's endpoint lacks."""
    endpoint = Endpoint(
        connection="o", kind="openai", model="m", base_url=llm_server.base_url, api_key="k"
    )

    async def main() -> list[str]:
        client = await clients.get_client(endpoint)
        try:
            return hooks.missing_hooks(client)
        finally:
            await clients.aclose_clients()

    return asyncio.run(main())


@pytest.mark.parametrize("hook", hooks.HOOKS)
def test_every_hook_is_checked_on_a_clients_first_request(
    llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch, hook: str
) -> None:
    assert _missing(llm_server) == []
    _remove(monkeypatch, hook)
    assert _missing(llm_server) == [hook]


@pytest.mark.parametrize("change", ["arguments", "reply"])
def test_a_send_hook_that_changed_falls_back_to_the_public_api_with_one_notice(
    llm_server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A release whose ``_send_request`` is there but takes other arguments, or answers with
    something else than an httpx response, as its own ``request`` expects: the short path's
    first request fails, and every row (those in flight too) goes through the public API."""
    expected, _ = _run(tmp_path, "hooks")
    llm_server.reset()
    original = openai.AsyncOpenAI._send_request

    class Wrapped:
        def __init__(self, response: Any) -> None:
            self.response = response

    async def changed(self: Any, request: Any, *, stream: bool, **kwargs: Any) -> Any:
        from_short_path = sys._getframe(1).f_globals.get("__name__") == prepared.__name__
        if from_short_path and change == "arguments":
            raise TypeError("_send_request() missing 1 required keyword-only argument: 'new'")
        response = await original(self, request, stream=stream, **kwargs)
        return Wrapped(response) if from_short_path else response

    monkeypatch.setattr(openai.AsyncOpenAI, "_send_request", changed)
    # Every request through ``_send_request`` (as an endpoint's first ones, on the SDK's httpx).
    monkeypatch.setattr(prepared, "_direct", lambda *args: None)
    rows, notices = _run(tmp_path, "public")
    assert rows == expected
    assert [r["status"] for r in rows] == ["ok"] * len(rows)
    public = [n for n in notices if "public API" in n]
    assert len(public) == 1 and "its _send_request" in public[0], notices


def test_a_transport_that_keeps_its_session_elsewhere_costs_only_the_straight_way(
    llm_server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's aiohttp transport with its session under another name than ``client`` (a
    release of the vendored transport that renamed it): requests go through ``_send_request``,
    every row scores, and no notice is given (the short path still serves)."""
    expected, _ = _run(tmp_path, "hooks")
    from flowkit.llm.sdk import openai as sdk

    transport_module = sys.modules.get("openai._vendor.httpx_aiohttp.transport") or sys.modules.get(
        "httpx_aiohttp.transport"
    )  # the distribution, before openai 2.32
    if transport_module is None:
        pytest.skip("this SDK has no vendored aiohttp transport")
    transport = transport_module.AiohttpTransport

    def get(self: Any) -> Any:
        if sys._getframe(1).f_globals.get("__name__") == prepared.__name__:
            raise AttributeError("client")
        return self.__dict__.get("renamed")

    def put(self: Any, value: Any) -> None:
        self.__dict__["renamed"] = value

    monkeypatch.setattr(transport, "client", property(get, put), raising=False)
    llm_server.reset()
    rows, notices = _run(tmp_path, "renamed")
    assert rows == expected
    assert [r["status"] for r in rows] == ["ok"] * len(rows)
    assert not any("public API" in n for n in notices)
    assert sdk is openai


def test_a_hook_that_takes_other_arguments_counts_as_missing(
    llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_make_status_error_from_response`` with a new required argument would turn every
    error status (a 429 to retry) into a TypeError that fails its row: checked at start."""
    original = openai.AsyncOpenAI._make_status_error_from_response

    def changed(self: Any, response: Any, *, request_id: str) -> Any:
        return original(self, response)

    assert _missing(llm_server) == []
    monkeypatch.setattr(openai.AsyncOpenAI, "_make_status_error_from_response", changed)
    assert _missing(llm_server) == [
        "_make_status_error_from_response as called here (it takes other arguments)"
    ]
