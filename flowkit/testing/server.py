"""A local OpenAI-compatible server, so tests, benchmarks and offline demos need no network.

Replies are a pure function of the request text (plus directives written into the prompt), so
the same prompt gets the same answer across processes, restarts and retries. Faults are drawn per
attempt from an RNG seeded by ``(seed, prompt, attempt number)``: runs are reproducible however the
requests interleave, and a retried request gets a fresh draw and can succeed.

Prompt directives (anywhere in any message; the last one of a kind wins):
``[[reply: TEXT]]`` (TEXT may span lines), ``[[fault: KIND]]``, ``[[fault-once: KIND]]`` (only the
first attempt of that exact prompt) with KIND one of 429, 500, timeout, malformed, garbage,
``[[latency: SECONDS]]`` and ``[[finish: REASON]]`` (stop, length or content_filter: the
finish_reason reported, e.g. a reply cut off by the token limit).

Besides the OpenAI routes (``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models``, also
without ``/v1`` and in the Azure ``/openai/deployments/{name}/...`` form) there are unauthenticated
control routes: ``GET /stats``, ``POST /reset`` and ``POST /config`` (a JSON object of fields),
and the batch API (``/v1/files``, ``/v1/batches``; see ``batches``).

This module runs the server (in a thread or a child process); what it answers lives in
``replies``, what goes wrong on purpose in ``faults``, the routes in ``app``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from flowkit.testing.app import Core
from flowkit.testing.config import FAULT_KINDS, Hook, ServerConfig
from flowkit.testing.replies import FINISH_REASONS, prompt_hash

__all__ = [
    "FAULT_KINDS",
    "FINISH_REASONS",
    "LISTENING",
    "Hook",
    "LocalServer",
    "ServerConfig",
    "SubprocessServer",
    "prompt_hash",
    "run_forever",
    "serve",
    "serve_subprocess",
]

LISTENING = "flowkit test server listening on"


async def _start_site(core: Core, host: str, port: int) -> tuple[web.AppRunner, int]:
    # Stalled "timeout" handlers must not hold shutdown for aiohttp's default 60 s, and a
    # client that gave up should free its handler at once.
    runner = web.AppRunner(
        core.app(), access_log=None, handler_cancellation=True, shutdown_timeout=0.2
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(
            exc.errno, f"flowkit test server cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from exc
    return runner, runner.addresses[0][1]


class _Handle:
    """Shared by both ways of running: URLs here; ``stats()``, ``reset()``, ``configure()``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.url = f"http://{host}:{port}"
        self.base_url = f"{self.url}/v1"


class LocalServer(_Handle):
    """A server on its own event loop in a daemon thread; ``config`` is the live object."""

    def __init__(self, config: ServerConfig) -> None:
        self._core = Core(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="flowkit-test-server"
        )
        self._thread.start()
        try:
            self._runner, port = self._call(_start_site(self._core, config.host, config.port))
        except BaseException:
            self._stop_loop()
            raise
        super().__init__(config.host, port)

    @property
    def config(self) -> ServerConfig:
        return self._core.config

    @config.setter
    def config(self, value: ServerConfig) -> None:
        self._core.config = value

    def stats(self) -> dict[str, Any]:
        return self._call(_later(self._core.snapshot))

    def reset(self) -> None:
        self._call(_later(self._core.reset))

    def recorded(self) -> list[dict[str, Any]]:
        """The chat request bodies received since the last reset (with ``record_requests``)."""
        return self._call(_later(lambda: list(self._core.recorded)))

    def configure(self, **changes: Any) -> ServerConfig:
        self._core.config = replace(self._core.config, **changes)
        return self._core.config

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._runner.cleanup())
            self._stop_loop()

    def _call(self, coro: Any) -> Any:
        # Counters are mutated on the loop thread only; reading them there gives a consistent
        # snapshot without locks on the hot path.
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


async def _later(function: Callable[[], Any]) -> Any:
    return function()


class SubprocessServer(_Handle):
    """A server in a child process (its own core, its own GIL); controlled over HTTP."""

    def __init__(self, process: subprocess.Popen[str], config: ServerConfig, port: int) -> None:
        super().__init__(config.host, port)
        self.process, self.config = process, config
        # Never route control calls through an HTTP proxy from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with self._opener.open(request, timeout=30) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        return self._request("GET", "/stats")

    def reset(self) -> None:
        self._request("POST", "/reset", {})

    def configure(self, **changes: Any) -> ServerConfig:
        """Change the child's config live (attribute writes on ``config`` would not reach it)."""
        self.config = replace(self.config, **changes)
        self._request("POST", "/config", changes)
        return self.config


@contextmanager
def serve(config: ServerConfig | None = None, **changes: Any) -> Iterator[LocalServer]:
    """Run the server in this process for the duration of the block."""
    server = LocalServer(replace(config or ServerConfig(), **changes))
    try:
        yield server
    finally:
        server.close()


@contextmanager
def serve_subprocess(
    config: ServerConfig | None = None, *, startup_timeout: float = 20.0, **changes: Any
) -> Iterator[SubprocessServer]:
    """Run the server in a child process, so benchmarks do not share a GIL with it."""
    config = replace(config or ServerConfig(), **changes)
    if config.hook is not None:
        raise ValueError(
            "ServerConfig.hook is a Python callable and cannot be sent to a "
            "subprocess; use rules or prompt directives, or serve() in-process"
        )
    # The child must import this same flowkit even when it is not installed.
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    command = [
        sys.executable,
        "-m",
        "flowkit.testing",
        "--config-json",
        json.dumps(config.to_dict()),
    ]
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True
        )
        try:
            port = _await_port(process, startup_timeout)
            if port is None:
                with contextlib.suppress(subprocess.TimeoutExpired):  # EOF can beat the exit
                    process.wait(timeout=0.5)
                code = process.poll()
                stderr.seek(0)
                why = (
                    f"exited with code {code}"
                    if code is not None
                    else f"did not announce its port within {startup_timeout}s"
                )
                raise RuntimeError(
                    f"flowkit test server subprocess {why}:\n{stderr.read()[-4000:]}"
                )
            yield SubprocessServer(process, config, port)
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()


def _await_port(process: subprocess.Popen[str], timeout: float) -> int | None:
    # readline() blocks, and select() on pipes is not portable; a reader thread is both.
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        return None
    found = re.search(r":(\d+)/v1\s*$", line) if line.startswith(LISTENING) else None
    return int(found.group(1)) if found else None


async def run_forever(config: ServerConfig) -> None:
    """Serve until SIGINT/SIGTERM; announce the URL on stdout (``serve_subprocess`` reads it)."""
    core = Core(config)
    runner, port = await _start_site(core, config.host, config.port)
    print(f"{LISTENING} http://{config.host}:{port}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Windows has no loop signal handlers; KeyboardInterrupt still stops it there.
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
