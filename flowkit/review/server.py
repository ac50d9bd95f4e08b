"""The review page's web server: aiohttp, bound to 127.0.0.1 by default, a token in the URL.

Routes (each needs ``?token=``): ``/`` the page; ``/api/state`` labels so far, progress and
budget; ``/api/row/LINE`` one row; ``POST /api/label`` ``{label_id, line, value}`` and
``POST /api/undo`` ``{label_id}``. A label is appended to RUN/labels.jsonl and fsynced before
the reply, so a label the page shows as saved survives a crash; its id (made by the page, kept
across retries) makes a repeated POST a no-op.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import socket
import time
from importlib import resources
from typing import Any

from aiohttp import web

from flowkit.errors import UsageError
from flowkit.labels.store import append, written_ids
from flowkit.review.rows import Review

_REVIEW: web.AppKey[Review] = web.AppKey("review", Review)
_TOKEN: web.AppKey[str] = web.AppKey("token", str)
_LOCK: web.AppKey[asyncio.Lock] = web.AppKey("lock", asyncio.Lock)


def new_token() -> str:
    return secrets.token_urlsafe(16)


@web.middleware
async def _check_token(request: web.Request, handler: Any) -> web.StreamResponse:
    given = request.query.get("token", "")
    if not hmac.compare_digest(given, request.app[_TOKEN]):
        raise web.HTTPForbidden(text="a review page needs its token: open the URL flowkit printed")
    response: web.StreamResponse = await handler(request)
    response.headers["Cache-Control"] = "no-store"
    return response


async def _page(request: web.Request) -> web.Response:
    html = resources.files("flowkit.review").joinpath("page.html").read_text("utf-8")
    return web.Response(text=html, content_type="text/html")


async def _state(request: web.Request) -> web.Response:
    return web.json_response(request.app[_REVIEW].state())


async def _row(request: web.Request) -> web.Response:
    review = request.app[_REVIEW]
    try:
        line = int(request.match_info["line"])
        return web.json_response(review.row(line), dumps=_dumps)
    except (ValueError, KeyError):
        raise web.HTTPNotFound(text="no such row") from None


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


async def _write(request: web.Request, record: dict[str, Any]) -> web.Response:
    """Append ``record`` unless its id is in the file already; reply with the new state."""
    review = request.app[_REVIEW]
    label_id = record.get("label_id")
    if not isinstance(label_id, str) or not label_id:
        raise web.HTTPBadRequest(text="a label needs a label_id")
    async with request.app[_LOCK]:
        # The id set is read from the file each time: another server (a second `flowkit review`
        # of the same run) may have written since.
        key = label_id + (":undo" if record.get("undo") else "")
        if key not in written_ids(review.labels_path):
            await asyncio.to_thread(append, review.labels_path, [record])
    return web.json_response(review.state())


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="the body is not JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body is not a JSON object")
    return body


async def _label(request: web.Request) -> web.Response:
    review = request.app[_REVIEW]
    body = await _body(request)
    line, value = body.get("line"), body.get("value")
    if line not in review.rows or not isinstance(value, (int, float)) or isinstance(value, bool):
        raise web.HTTPBadRequest(text="a label needs a row line and a number")
    if float(value) not in review.levels:
        raise web.HTTPBadRequest(text=f"{value} is not on the scale {review.levels}")
    record = {
        "label_id": body.get("label_id"),
        "line": line,
        review.output: float(value),
        "annotator": review.annotator,
        "time": time.time(),
    }
    return await _write(request, record)


async def _undo(request: web.Request) -> web.Response:
    body = await _body(request)
    return await _write(request, {"label_id": body.get("label_id"), "undo": True})


def make_app(review: Review, token: str) -> web.Application:
    app = web.Application(middlewares=[_check_token])
    app[_REVIEW] = review
    app[_TOKEN] = token
    app[_LOCK] = asyncio.Lock()
    app.router.add_get("/", _page)
    app.router.add_get("/api/state", _state)
    app.router.add_get("/api/row/{line}", _row)
    app.router.add_post("/api/label", _label)
    app.router.add_post("/api/undo", _undo)
    return app


async def serve(review: Review, host: str, port: int, token: str, announce: Any) -> None:
    """Serve until cancelled (Ctrl-C); ``announce(url)`` once the port is bound."""
    runner = web.AppRunner(make_app(review, token), access_log=None)
    await runner.setup()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    await web.SockSite(runner, sock).start()
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    announce(f"http://{shown}:{bound}/?token={token}")
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
