"""The test server's batch API: OpenAI's ``/v1/files`` and ``/v1/batches``, offline.

A batch's status is worked out when it is read, from the time since it was created and
``ServerConfig.batch_delay``: validating for the first third, in_progress for the second,
finalizing for the third, then completed (or expired). Its lines are answered once, when it
finishes, by the same code that answers ``/v1/chat/completions`` (``Core.completion``), so a
batched call gets the reply an online one would. What goes wrong on purpose: a share of lines
(``batch_fail_rate``, drawn per prompt and attempt, so a retry may succeed) answered in the error
file with a 500; a ``[[fault: malformed]]`` (or ``fault-once``) prompt answered with a 200
whose body is no chat completion; the first ``batch_expiring`` batches expire with
``batch_expire_done`` of their lines finished; an input file that breaks the rules (bad JSON,
a missing field, another URL, a model other than the first line's, a custom_id twice, more
than ``batch_max_requests`` lines) fails the batch at validation; the first
``batch_create_lost`` creates make their batch but answer a 500, as when the reply is lost on
the way.

The counters (``snapshot``) say what was paid: ``batch_lines`` answered, and ``batch_prompts``,
how many times each prompt was answered in a batch.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from flowkit.testing import replies
from flowkit.testing.faults import ApiError, json_response

if TYPE_CHECKING:
    from flowkit.testing.app import Core

ENDPOINTS = ("/v1/chat/completions",)
_EXPIRED = "This request could not be executed before the completion window expired."
_CANCELLED = "This request was cancelled before it was executed."


class BatchApi:
    """Files and batches of one test server; only touched from its event loop."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.reset()

    def reset(self) -> None:
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.created = self.lines = self.cancelled = 0
        self.prompts: Counter[str] = Counter()  # prompt hash -> lines answered (paid)
        self.tries: Counter[str] = Counter()  # prompt hash -> lines read, failed ones too
        self._ids = itertools.count(1)

    def snapshot(self) -> dict[str, Any]:
        statuses = Counter(b["status"] for b in self.batches.values())
        return {
            "batches_created": self.created,
            "batches_cancelled": self.cancelled,
            "batch_statuses": dict(statuses),
            "batch_lines": self.lines,
            "batch_prompts": dict(self.prompts),
            "batch_paid_twice": sum(1 for n in self.prompts.values() if n > 1),
        }

    def add_routes(self, app: web.Application) -> None:
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/files", self._upload)
            app.router.add_get(f"{prefix}/files/{{id}}", self._file)
            app.router.add_get(f"{prefix}/files/{{id}}/content", self._content)
            app.router.add_post(f"{prefix}/batches", self._create)
            app.router.add_get(f"{prefix}/batches", self._list)
            app.router.add_get(f"{prefix}/batches/{{id}}", self._retrieve)
            app.router.add_post(f"{prefix}/batches/{{id}}/cancel", self._cancel)

    # -- files ------------------------------------------------------------------------------
    def _new_file(self, data: bytes, filename: str, purpose: str) -> dict[str, Any]:
        file_id = f"file-{next(self._ids):06d}"
        self.contents[file_id] = data
        self.files[file_id] = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        return self.files[file_id]

    async def _upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        purpose, upload = form.get("purpose"), form.get("file")
        if not isinstance(purpose, str) or not purpose:
            raise ApiError(400, "'purpose' is required")
        if not isinstance(upload, web.FileField):
            raise ApiError(400, "'file' must be an uploaded file")
        data = upload.file.read()
        if purpose == "batch" and len(data) > self.core.config.batch_max_bytes:
            raise ApiError(
                400, f"a batch input file may hold {self.core.config.batch_max_bytes} bytes at most"
            )
        return json_response(self._new_file(data, upload.filename, purpose))

    def _known_file(self, request: web.Request) -> str:
        file_id = request.match_info["id"]
        if file_id not in self.files:
            raise ApiError(404, f"No such File object: {file_id}", code="not_found")
        return file_id

    async def _file(self, request: web.Request) -> web.Response:
        return json_response(self.files[self._known_file(request)])

    async def _content(self, request: web.Request) -> web.Response:
        body = self.contents[self._known_file(request)]
        return web.Response(body=body, content_type="application/octet-stream")

    # -- batches ----------------------------------------------------------------------------
    async def _create(self, request: web.Request) -> web.Response:
        body = await request.json()
        file_id = body.get("input_file_id")
        if file_id not in self.files or self.files[file_id]["purpose"] != "batch":
            raise ApiError(400, f"input_file_id {file_id!r} is not a file uploaded for batch")
        if body.get("endpoint") not in ENDPOINTS:
            raise ApiError(400, f"endpoint must be one of {list(ENDPOINTS)}")
        if body.get("completion_window") != "24h":
            raise ApiError(400, "completion_window must be '24h'")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict) or len(metadata) > 16:
            raise ApiError(400, "metadata must be an object of at most 16 pairs")
        now = time.time()
        self.created += 1
        batch_id = f"batch_{next(self._ids):06d}"
        batch: dict[str, Any] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "errors": None,
            "input_file_id": file_id,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": int(now),
            "in_progress_at": None,
            "expires_at": int(now) + 86400,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": metadata,
            "_created": now,
            "_expires": self.created <= self.core.config.batch_expiring,
        }
        self.batches[batch_id] = batch
        if self.created <= self.core.config.batch_create_lost:  # made, but the reply is lost
            raise ApiError(500, "The server had an error (fault injected)", kind="server_error")
        return json_response(_shown(batch))

    def _known_batch(self, request: web.Request) -> dict[str, Any]:
        batch_id = request.match_info["id"]
        if batch_id not in self.batches:
            raise ApiError(404, f"No such Batch object: {batch_id}", code="not_found")
        return self.batches[batch_id]

    async def _retrieve(self, request: web.Request) -> web.Response:
        batch = self._known_batch(request)
        await self._advance(batch)
        return json_response(_shown(batch))

    async def _cancel(self, request: web.Request) -> web.Response:
        batch = self._known_batch(request)
        await self._advance(batch)
        if batch["status"] in ("validating", "in_progress", "finalizing"):
            self.cancelled += 1
            now = int(time.time())
            batch.update(status="cancelling", cancelling_at=now)
            lines = self._lines(batch)
            if isinstance(lines, list):
                self._finish(
                    batch, [], [_error(line, "batch_cancelled", _CANCELLED) for line in lines]
                )
                batch.update(status="cancelled", cancelled_at=now)
        return json_response(_shown(batch))

    async def _list(self, request: web.Request) -> web.Response:
        limit = int(request.query.get("limit", "20"))
        after = request.query.get("after")
        newest = sorted(self.batches.values(), key=lambda b: b["_created"], reverse=True)
        if after in self.batches:
            newest = newest[[b["id"] for b in newest].index(after) + 1 :]
        for batch in newest[:limit]:
            await self._advance(batch)
        page = [_shown(b) for b in newest[:limit]]
        return json_response(
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(newest) > limit,
            }
        )

    async def _advance(self, batch: dict[str, Any]) -> None:
        """Move ``batch`` to the status its age says; answer its lines when it finishes."""
        if batch["status"] not in ("validating", "in_progress", "finalizing"):
            return
        cfg = self.core.config
        age = time.time() - batch["_created"]
        share = age / cfg.batch_delay if cfg.batch_delay > 0 else 1.0
        lines = self._lines(batch)
        if isinstance(lines, str):  # the input breaks a rule: the batch fails at validation
            batch.update(status="failed", failed_at=int(time.time()))
            batch["errors"] = {
                "object": "list",
                "data": [{"code": "invalid_input", "message": lines}],
            }
            return
        total = len(lines)
        counts = batch["request_counts"]
        counts["total"] = total
        if share < 1 / 3:
            return
        now = int(time.time())
        if batch["in_progress_at"] is None:
            batch["in_progress_at"] = now
        counts["completed"] = min(total, int(total * share))
        batch["status"] = "in_progress" if share < 2 / 3 else "finalizing"
        if share < 2 / 3:
            return
        batch["finalizing_at"] = batch["finalizing_at"] or now
        if share < 1:
            return
        done = math.ceil(total * cfg.batch_expire_done) if batch["_expires"] else total
        out: list[dict[str, Any]] = []
        err: list[dict[str, Any]] = []
        for line in lines[:done]:
            reply = await self._answer(line)
            (out if reply["response"]["status_code"] == 200 else err).append(reply)
        err += [_error(line, "batch_expired", _EXPIRED) for line in lines[done:]]
        self._finish(batch, out, err)
        if batch["_expires"]:
            batch.update(status="expired", expired_at=now)
        else:
            batch.update(status="completed", completed_at=now)

    def _lines(self, batch: dict[str, Any]) -> list[dict[str, Any]] | str:
        """The input file's requests, or what is wrong with it."""
        text = self.contents[batch["input_file_id"]].decode("utf-8", "replace")
        lines: list[dict[str, Any]] = []
        seen: set[str] = set()
        for number, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                return f"line {number} is not JSON"
            if not isinstance(line, dict) or not {"custom_id", "method", "url", "body"} <= set(
                line
            ):
                return f"line {number} lacks custom_id, method, url or body"
            if line["url"] != batch["endpoint"] or line["method"] != "POST":
                return f"line {number}: every line must be a POST to {batch['endpoint']}"
            model = line["body"].get("model") if isinstance(line["body"], dict) else None
            if lines and model != lines[0]["body"].get("model"):
                return f"line {number}: every line must ask the same model as the first"
            if line["custom_id"] in seen:
                return f"line {number}: custom_id {line['custom_id']!r} is used twice"
            seen.add(line["custom_id"])
            lines.append(line)
        if len(lines) > self.core.config.batch_max_requests:
            return f"a batch may hold {self.core.config.batch_max_requests} requests at most"
        return lines

    async def _answer(self, line: dict[str, Any]) -> dict[str, Any]:
        """One line's output (or error-file) record."""
        from flowkit.testing.asks import checked_messages, reply_shape

        request_id = f"req_{next(self._ids):06d}"
        body = line["body"]
        try:
            messages = checked_messages(body)
            shape = reply_shape(body)
            model = body.get("model")
            if not isinstance(model, str) or not model:
                raise ApiError(400, "'model' is required")
        except ApiError as exc:
            return _line(line, request_id, exc.status, {"error": {"message": str(exc)}})
        text = replies.messages_text(messages)
        key = replies.sha(text)
        self.tries[key] += 1
        attempt = self.tries[key]
        cfg = self.core.config
        if random.Random(f"{cfg.seed}:batch:{key}:{attempt}").random() < cfg.batch_fail_rate:
            failure = {"error": {"message": "The server had an error (fault injected)"}}
            return _line(line, request_id, 500, failure)
        found = replies.directives(text) if "[[" in text else {}
        fault = found.get("fault-once") if attempt == 1 else None
        if (fault or found.get("fault")) == "malformed":  # paid for, and of no use
            self.prompts[key] += 1
            self.lines += 1
            return _line(line, request_id, 200, {"hello": "world"})
        scripted = found["reply"] if "reply" in found else await self.core._scripted(body, messages)
        if isinstance(scripted, web.StreamResponse):
            scripted = None
        reply = self.core.completion(body, model, shape, scripted, found, attempt)
        self.prompts[key] += 1
        self.lines += 1
        self.core.by_model[model] += 1
        return _line(line, request_id, 200, reply)

    def _finish(
        self, batch: dict[str, Any], out: list[dict[str, Any]], err: list[dict[str, Any]]
    ) -> None:
        def written(records: list[dict[str, Any]], what: str) -> str | None:
            if not records:
                return None
            data = "".join(json.dumps(r) + "\n" for r in records).encode()
            return str(self._new_file(data, f"{batch['id']}_{what}.jsonl", "batch_output")["id"])

        batch["output_file_id"] = written(out, "output")
        batch["error_file_id"] = written(err, "error")
        batch["request_counts"] = {
            "total": len(out) + len(err),
            "completed": len(out),
            "failed": len(err),
        }


def _line(
    line: dict[str, Any], request_id: str, status: int, body: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": f"batch_{request_id}",
        "custom_id": line["custom_id"],
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }


def _error(line: dict[str, Any], code: str, message: str) -> dict[str, Any]:
    return {
        "id": f"batch_req_{line['custom_id']}",
        "custom_id": line["custom_id"],
        "response": None,
        "error": {"code": code, "message": message},
    }


def _shown(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if not k.startswith("_")}
