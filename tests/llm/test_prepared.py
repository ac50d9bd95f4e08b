"""A prepared chat request puts the same bytes on the wire as the SDK's own ``post`` (URL with
Azure's deployment path and api-version, headers, body) through the SDK transport's own
session, follows a redirect and raises the same error types as ``post``, and gives way to
the SDK's public API when the SDK lacks the hooks it uses. Real HTTP to the local test server,
or to a server in the test that records what reached it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from aiohttp import web

from flowkit.llm import clients, prepared
from flowkit.llm.client import chat
from flowkit.llm.endpoint import Endpoint, Limits
from flowkit.testing.server import LocalServer

MESSAGES = [{"role": "user", "content": "Fact: the sky is blue. Answer: ✓ blue"}]
# Headers that differ between any two requests the SDK builds (not what is being compared).
VOLATILE = {"content-length", "x-stainless-raw-response"}


def _endpoints(server: LocalServer) -> dict[str, Endpoint]:
    root = server.base_url.removesuffix("/v1")
    limits = Limits(max_retries=0)
    return {
        "openai": Endpoint(
            connection="o",
            kind="openai",
            model="m",
            base_url=server.base_url,
            limits=limits,
            api_key="sk-local-test",
        ),
        "azure": Endpoint(
            connection="a",
            kind="azure",
            model="m",
            azure_endpoint=root,
            api_version="2024-06-01",
            deployment="judge-dep",
            api_key="sk-local-test",
            limits=limits,
        ),
    }


COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}}],
}


class Recorder:
    """A real HTTP server that keeps what each request put on the wire and answers a chat
    completion; ``redirect`` first sends every chat request elsewhere with a 307, ``delay``
    holds each reply."""

    def __init__(self, *, redirect: bool = False, delay: float = 0.0) -> None:
        self.seen: list[dict[str, Any]] = []
        self.redirect = redirect
        self.delay = delay
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.redirect and not request.path.startswith("/moved"):
            raise web.HTTPTemporaryRedirect(f"/moved{request.path_qs}")
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in VOLATILE}
        self.seen.append({"url": request.path_qs, "headers": headers, "body": body})
        await asyncio.sleep(self.delay)
        return web.json_response(COMPLETION)

    async def __aenter__(self) -> Recorder:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def _at(endpoint: Endpoint, url: str) -> Endpoint:
    if endpoint.kind == "azure":
        return endpoint.model_copy(update={"azure_endpoint": url})
    return endpoint.model_copy(update={"base_url": f"{url}/v1"})


def _sent(endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Chat once through ``endpoint`` the prepared way, then once the SDK's public API way,
    and return what reached the server each time."""

    async def main() -> list[dict[str, Any]]:
        async with Recorder() as server:
            for fast in (True, False):
                with monkeypatch.context() as patch:
                    if not fast:
                        patch.delattr(openai._models, "FinalRequestOptions")
                    result = await chat(
                        _at(endpoint, server.url),
                        "m",
                        MESSAGES,
                        {"temperature": 0, "extra_headers": {"x-a": "1"}},
                    )
                    assert result.text == "5"
                    await clients.aclose_clients()
        return server.seen

    return asyncio.run(main())


@pytest.mark.parametrize("kind", ["openai", "azure"])
def test_a_prepared_request_sends_what_the_sdk_post_sends(
    llm_server: LocalServer, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    fast, slow = _sent(_endpoints(llm_server)[kind], monkeypatch)
    # The public API writes the same fields in its own order.
    body = json.loads(fast.pop("body"))
    assert body == json.loads(slow.pop("body"))
    assert fast == slow
    if kind == "azure":
        path = "/openai/deployments/judge-dep/chat/completions?api-version=2024-06-01"
        assert fast["url"] == path
        assert fast["headers"]["api-key"]
    else:
        assert fast["url"] == "/v1/chat/completions"
        assert fast["headers"]["authorization"] == "Bearer sk-local-test"
    assert fast["headers"]["x-a"] == "1"
    assert fast["headers"]["content-type"] == "application/json"
    assert body["messages"] == MESSAGES


def test_requests_go_straight_to_the_sdk_transports_session(llm_server: LocalServer) -> None:
    endpoint = _endpoints(llm_server)["openai"]

    async def main() -> None:
        await chat(endpoint, "m", MESSAGES, {})
        client = await clients.get_client(endpoint)
        (template,) = prepared._templates[client].values()
        assert template is not None and template.direct is not None
        # One pool: the SDK's own path (client.post) sends through the same session.
        assert client._client._transport.client is template.direct.session
        await clients.aclose_clients()
        assert template.direct.session.closed

    asyncio.run(main())


def test_a_redirect_is_followed_the_sdk_way() -> None:
    endpoint = Endpoint(
        connection="o", kind="openai", model="m", base_url="", limits=Limits(max_retries=0)
    )

    async def main() -> list[dict[str, Any]]:
        async with Recorder(redirect=True) as server:
            result = await chat(_at(endpoint, server.url), "m", MESSAGES, {})
            assert result.text == "5"
            await clients.aclose_clients()
        return server.seen

    (request,) = asyncio.run(main())
    assert request["url"] == "/moved/v1/chat/completions"
    assert json.loads(request["body"])["messages"] == MESSAGES


def test_a_reply_later_than_the_attempt_timeout_is_the_sdks_timeout_error() -> None:
    async def main() -> Exception:
        async with Recorder(delay=0.5) as server:
            endpoint = Endpoint(
                connection="o",
                kind="openai",
                model="m",
                base_url=f"{server.url}/v1",
                limits=Limits(max_retries=0),
            )
            client = await clients.get_client(endpoint)
            body = {"model": "m", "messages": MESSAGES}
            try:
                await prepared.post_chat(client, body, headers={}, query=None, timeout=0.1)
            except Exception as err:  # the type is the assertion
                return err
            finally:
                await clients.aclose_clients()
        raise AssertionError("no error")

    err = asyncio.run(main())
    assert type(err) is openai.APITimeoutError


def test_one_template_serves_every_request_of_a_shape(llm_server: LocalServer) -> None:
    endpoint = _endpoints(llm_server)["openai"]

    async def main() -> tuple[int, list[Any]]:
        replies = await asyncio.gather(
            *(chat(endpoint, "m", [{"role": "user", "content": f"q{i}"}], {}) for i in range(5))
        )
        client = await clients.get_client(endpoint)
        shapes = dict(prepared._templates[client])
        await clients.aclose_clients()
        return len(replies), list(shapes.values())

    count, templates = asyncio.run(main())
    assert count == 5 and len(templates) == 1 and templates[0] is not None
    assert llm_server.stats()["chat_completions"] == 5


def test_errors_keep_the_sdk_types(llm_server: LocalServer) -> None:
    bad_key = _endpoints(llm_server)["openai"].model_copy(update={"model": "m"})
    bad_key = Endpoint(**{**bad_key.model_dump(), "api_key": "wrong-key"})
    refused = Endpoint(
        connection="r",
        kind="openai",
        model="m",
        base_url="http://127.0.0.1:9/v1",
        limits=Limits(max_retries=0),
    )

    async def ask(endpoint: Endpoint) -> Exception:
        try:
            await chat(endpoint, "m", MESSAGES, {})
        except Exception as err:  # the type is the assertion
            return err
        finally:
            await clients.aclose_clients()
        raise AssertionError("no error")

    llm_server.configure(api_key="right-key")
    try:
        assert isinstance(asyncio.run(ask(bad_key)), openai.AuthenticationError)
    finally:
        llm_server.configure(api_key=None)
    err = asyncio.run(ask(refused))
    assert isinstance(err, openai.APIConnectionError)
    assert "refused" in str(err) and "127.0.0.1:9" in str(err)


@pytest.mark.parametrize(
    "value",
    ["plain", "tab\tnl\ncr\r", "\x00\x1f\x7f", "\u2028", "é😀", '"q"\\', 0.1, 1.0, 7, 10**20, None],
)
def test_a_body_is_the_json_httpx_writes(value: Any) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "v": value}
    expected = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert prepared._body(body) == expected.encode()


def test_a_body_with_numbers_in_exponent_form_or_numpy_scalars_reads_as_httpxs() -> None:
    np = pytest.importorskip("numpy")

    class Name(str):
        pass

    body = {"m": Name("gpt"), "t": np.float64(0.25), "tiny": 1e-07, "big": 1e22, "n": None}
    expected = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    assert json.loads(prepared._body(body)) == json.loads(expected)


def test_a_body_with_a_non_finite_number_is_refused_as_httpx_refuses_it() -> None:
    with pytest.raises(ValueError, match="Out of range float values"):
        prepared._body({"model": "m", "temperature": float("nan")})


def test_a_reply_with_nan_is_read_as_the_standard_library_reads_it() -> None:
    # Python servers write -Infinity for an impossible token's logprob.
    reply = prepared._Reply(200, {}, b'{"logprob": -Infinity, "x": [1, 2]}')
    assert reply.json() == {"logprob": float("-inf"), "x": [1, 2]}
    assert prepared._Reply(200, {}, b'{"a": {"b": null}}').json() == {"a": {"b": None}}
    with pytest.raises(ValueError):
        prepared._Reply(200, {}, b"<html>").json()
