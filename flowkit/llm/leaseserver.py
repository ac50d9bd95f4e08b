"""The driver's side of ``leases``: its schedulers, served to the run's workers over a websocket
(aiohttp, from a thread of its own), and where it listens (see ``leases``' doc)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from flowkit.errors import FlowkitError
from flowkit.llm.leases import ADDRESS_ENV, BIND_ENV, Channel, RemoteFailure, Ticket, pack, verdict

if TYPE_CHECKING:
    from aiohttp import web

    from flowkit.llm.endpoint import Endpoint
    from flowkit.llm.session import LlmSession


STOP_SECONDS = 2.0
"""How long stopping the service waits for workers' connections still open to end."""


class LeaseService:
    """The driver's schedulers (``session``'s), served to workers; see the module doc."""

    def __init__(
        self,
        session: LlmSession,
        settings: Any,
        *,
        cluster: bool = False,
        entries: Callable[[list[str]], dict[str, bytes]] | None = None,
    ) -> None:
        self.session = session
        self._entries = entries
        """The driver's cache entries for a worker's keys (run in a thread: it reads a store)."""
        self.token = secrets.token_urlsafe(32)
        self._settings = settings
        self._keys = {n: c.api_key for n, c in getattr(settings, "connections", {}).items()}
        self._endpoints: dict[str, Endpoint] = {}
        bind = os.environ.get(BIND_ENV) or ("0.0.0.0" if cluster else "127.0.0.1")
        self._host, self._port = _host_port(bind, 0)
        self._loop = asyncio.new_event_loop()
        self._runner: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def start(self) -> Ticket:
        """Serve from a thread of this process; the ticket workers need."""
        ready: asyncio.Future[int] = self._loop.create_future()
        thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        thread.name = "flowkit-leases"
        thread.start()
        self._thread = thread
        port = asyncio.run_coroutine_threadsafe(_wait(ready), self._loop).result(30)
        advertised = os.environ.get(ADDRESS_ENV)
        if advertised:
            host, port = _host_port(advertised, port)
        else:
            host = socket.getfqdn() if self._host in ("0.0.0.0", "::", "") else self._host
        self.url = f"ws://{host}:{port}/lease"
        settings = self._settings
        dump = settings.model_dump(mode="json", exclude_unset=True) if settings else None
        return Ticket(self.url, self.token, dump)

    def _serve(self, ready: asyncio.Future[int]) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._open(ready))
        self._loop.run_forever()

    async def _open(self, ready: asyncio.Future[int]) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/lease", self._socket)
        # A worker's chunk that still runs holds its websocket open (a Dask task cannot be
        # stopped): stopping waits only this long for it, not aiohttp's default 60 s.
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=STOP_SECONDS)
        await self._runner.setup()
        try:
            site = web.TCPSite(self._runner, self._host, self._port)
            await site.start()
        except OSError as err:
            ready.set_exception(
                FlowkitError(
                    f"cannot serve the run's endpoint budgets on {self._host}:{self._port}: {err}",
                    hint=f"set ${BIND_ENV} to an address and port this host can listen on",
                )
            )
            return
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        ready.set_result(sockets[0].getsockname()[1] if sockets else self._port)

    def stop(self) -> None:
        """Stop serving; the workers' calls in progress fail. Never raises: it runs as a run
        ends, often on the way out of the run's own error, which must stay the one reported."""
        if self._runner is not None:
            cleanup = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            with suppress(Exception):
                cleanup.result(STOP_SECONDS + 10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self._loop.close()

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import WSMsgType, web

        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401, text="this run's lease token is required")
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        channel = Channel(ws)
        tasks: dict[int, asyncio.Task[None]] = {}
        reports: dict[int, tuple[int, asyncio.Future[dict[str, Any]]]] = {}
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                rid, op = data["id"], data["op"]
                if op == "run":
                    task = asyncio.ensure_future(self._lease(channel, reports, data))
                    tasks[rid] = task
                    task.add_done_callback(functools.partial(_forget, tasks, rid))
                elif op == "entries":
                    task = asyncio.ensure_future(self._send_entries(channel, rid, data["keys"]))
                    tasks[rid] = task
                    task.add_done_callback(functools.partial(_forget, tasks, rid))
                elif op == "done":
                    # A report of an attempt already cut (the worker sent it before it heard)
                    # is not the report of the attempt that replaced it.
                    found = reports.get(rid)
                    if found is not None and found[0] == data.get("n") and not found[1].done():
                        del reports[rid]
                        found[1].set_result(data)
                elif op == "cancel" and rid in tasks:
                    tasks[rid].cancel()
        finally:
            for task in list(tasks.values()):
                task.cancel()
            await channel.close()
        return ws

    async def _send_entries(self, channel: Channel, rid: int, keys: list[str]) -> None:
        """Answer a worker's cache keys from the driver's store: what it holds, by key."""
        found: dict[str, bytes] = {}
        if self._entries is not None:
            # A store that fails answers nothing: the worker pays, as it would have before.
            with suppress(Exception):
                found = await asyncio.get_running_loop().run_in_executor(None, self._entries, keys)
        text = {key: raw.decode() for key, raw in found.items()}
        channel.send({"op": "entries", "id": rid, "found": text})

    def _endpoint(self, described: dict[str, Any]) -> Endpoint:
        """The driver's endpoint for a worker's description of it (with the driver's key, so
        it is the very scheduler and memory a local run of the driver would use)."""
        from flowkit.llm.endpoint import Endpoint

        text = json.dumps(described, sort_keys=True)
        found = self._endpoints.get(text)
        if found is None:
            endpoint = Endpoint.model_validate(described)
            key = self._keys.get(endpoint.connection)
            found = self._endpoints[text] = endpoint.model_copy(update={"api_key": key})
        return found

    async def _lease(
        self,
        channel: Channel,
        reports: dict[int, tuple[int, asyncio.Future[dict[str, Any]]]],
        data: dict[str, Any],
    ) -> None:
        rid = data["id"]
        attempts = itertools.count(1)

        async def attempt() -> dict[str, Any]:
            report: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            n = next(attempts)
            reports[rid] = (n, report)
            channel.send({"op": "go", "id": rid, "n": n})
            try:
                found = await report
            except asyncio.CancelledError:  # cut as stalled, or the worker gave up the row
                reports.pop(rid, None)
                channel.send({"op": "cancel", "id": rid})
                raise
            if found.get("ok"):
                return found
            raise RemoteFailure(verdict(found["verdict"]))

        try:
            endpoint = self._endpoint(data["endpoint"])
            scheduler = self.session.scheduler_for(endpoint, data["model"])
            done = await scheduler.run(
                attempt,
                tokens=data.get("tokens", 0),
                used_tokens=lambda r: r.get("used"),
                headers=lambda r: r.get("headers"),
                timeout=data.get("timeout"),
                on_arrival=bool(data.get("on_arrival")),
                detail=data.get("detail", ""),
                cap=data.get("cap", "max_tokens"),
                rule=data.get("rule", ""),
                rules=data.get("rules") or None,
            )
        except RemoteFailure:
            channel.send({"op": "raise", "id": rid})  # the worker raises its own exception
        except Exception as exc:
            channel.send({"op": "error", "id": rid, "error": pack(exc)})
        else:
            channel.send({"op": "end", "id": rid, "attempts": done.attempts})


def _forget(tasks: dict[int, asyncio.Task[None]], rid: int, _: object) -> None:
    tasks.pop(rid, None)


def _host_port(text: str, port: int) -> tuple[str, int]:
    """``HOST`` or ``HOST:PORT`` (``port`` when it names none)."""
    host, colon, given = text.strip().rpartition(":")
    if not colon or not given.isdigit():
        return text.strip(), port
    return host, int(given)


async def _wait(ready: asyncio.Future[int]) -> int:
    return await ready


@contextmanager
def serve_leases(
    session: LlmSession,
    settings: Any,
    *,
    cluster: bool = False,
    entries: Callable[[list[str]], dict[str, bytes]] | None = None,
) -> Iterator[Ticket]:
    """Within: ``session``'s schedulers (and with ``entries``, the driver's cache) are served
    to the run's workers (see the module doc)."""
    service = LeaseService(session, settings, cluster=cluster, entries=entries)
    try:
        yield service.start()
    finally:
        service.stop()
