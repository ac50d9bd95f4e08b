"""What one run holds of the model-calling layer: its schedulers, clients, endpoint memory and
usage, in an :class:`LlmSession`.

Nothing of it is process-wide: two runs in one process, in threads or in tasks, never share a
scheduler, a client or a memory, so one run's learned pace, down endpoint or closed client never
reaches another. A run finds its session through the context variable :data:`current` that the
run sets (``using``): asyncio tasks inherit it, and so do the threads a python node's function
runs in (``contextvars.copy_context``) and the model calls Prompt Flow tools make from them
(``flowkit.pfcompat.connections``). ``chat`` and ``embed`` (``client``) take the current
session's scheduler and client; outside any run, e.g. a user calling ``flowkit.llm.chat`` from a
notebook, they use the process's default session (:func:`default_session`), created on first
use, which remembers nothing on disk and keeps its schedulers until
:func:`reset_default_session`.

Sharing between runs is explicit: a session joins a :class:`~flowkit.llm.shared.SharedEndpoints`
(by default the process's, ``shared.PROCESS``), from which it draws each endpoint's declared
``rpm`` / ``tpm``, so runs in one process together stay under them. A session made with
``shared=None`` keeps its budgets to itself. A scale-out worker's session draws from none of
its own: its ``lease`` hands every call to the driver's schedulers (``leases``).

Closing the session (the end of :func:`run_session`) saves what its schedulers learned to the
endpoint memory and closes its clients.

This module imports nothing that loads the SDK until a model is called.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from flowkit.llm.memory import FILE, EndpointMemory
from flowkit.llm.shared import PROCESS, DeclaredBudget, SharedEndpoints

if TYPE_CHECKING:
    from flowkit.llm.clients import ClientPool
    from flowkit.llm.endpoint import Endpoint
    from flowkit.llm.leases import LeaseClient
    from flowkit.llm.scheduler import Scheduler
    from flowkit.llm.usage import UsageTracker


class BatchRoute(Protocol):
    """What a run in batch mode puts between ``chat`` and the endpoint (``flowkit.batch``)."""

    def takes(self, endpoint: Endpoint) -> bool:
        """Whether calls to ``endpoint`` are batched."""

    async def chat(self, endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
        """The checked reply to ``body``, with what its batch says of it under
        ``flowkit_batch``; only the latter when it is to be asked online after all."""


class LlmSession:
    """One run's schedulers, clients, endpoint memory and usage (thread-safe).

    ``memory``: where endpoints open from and what they learned is saved to (None: nothing is
    remembered). ``shared``: the declared budgets this session shares with other runs (None:
    its own alone).
    """

    def __init__(
        self,
        *,
        memory: EndpointMemory | None = None,
        shared: SharedEndpoints | None = PROCESS,
    ) -> None:
        self.memory = memory
        self.shared = shared
        self.noted: set[str] = set()
        """Configuration notes already said in this run (``config``)."""
        self.notes: list[str] = []
        """What the run's notices (run.json) must say of its model calls, besides what
        endpoint memory notes (``memory.notes``)."""
        self.batch: BatchRoute | None = None
        """Where chat calls go in batch mode (``flowkit.batch``); None: to the endpoint."""
        self.closed = False
        self.lease: LeaseClient | None = None
        """A scale-out worker's draw on the driver's schedulers (``leases``): while set, every
        scheduler of this session is the driver's."""
        self._lock = threading.Lock()
        self._schedulers: dict[tuple[tuple[str, ...], str, int], Scheduler] = {}
        # Without shared budgets, the session's own: its per-thread schedulers share them.
        self._own = SharedEndpoints()
        self._clients: ClientPool | None = None
        self._usage: UsageTracker | None = None

    @property
    def usage(self) -> UsageTracker:
        """Tokens of every call made through this session, per connection and model."""
        if self._usage is None:
            from flowkit.llm.usage import UsageTracker

            with self._lock:
                if self._usage is None:
                    self._usage = UsageTracker()
        return self._usage

    @property
    def clients(self) -> ClientPool:
        """The session's SDK clients (the SDK is loaded on first use)."""
        if self._clients is None:
            from flowkit.llm.clients import ClientPool

            with self._lock:
                if self._clients is None:
                    self._clients = ClientPool()
        return self._clients

    def _declared(self, endpoint: Endpoint) -> DeclaredBudget | None:
        """The declared budgets of ``endpoint`` (None if it declares none): the shared ones,
        or this session's own."""
        return (self.shared if self.shared is not None else self._own).budget(endpoint)

    def scheduler_for(self, endpoint: Endpoint, model: str | None = None) -> Scheduler:
        """The scheduler of ``endpoint`` and ``model`` (default: the endpoint's) for this
        thread, created on first use. An Azure deployment is its own model, whatever the label.

        One per endpoint and model for the run. Each thread that runs its own event loop
        (Prompt Flow tools' model calls, the threading backend's workers) gets its own, as a
        process would: a scheduler's waiters belong to one loop. They draw from one declared
        budget all the same.
        """
        from flowkit.llm.scheduler import Scheduler

        if self.lease is not None:  # the run's budgets are the driver's: so is its scheduler
            return self.lease.scheduler(endpoint, model)  # type: ignore[return-value]
        identity = endpoint.identity()
        model = endpoint.deployment or model or endpoint.model  # what the request names
        key = (identity, model, threading.get_ident())
        with self._lock:
            found = self._schedulers.get(key)
            if found is not None:
                return found
            found = self._schedulers[key] = Scheduler(
                endpoint.limits,
                name=endpoint.connection,
                url=endpoint.url,
                model=model,
                declared=self._declared(endpoint),
            )
        if self.memory is not None:
            self.memory.attach(identity, model, found)
        return found

    def schedulers(self) -> list[Scheduler]:
        """Every scheduler this session created, for run summaries."""
        with self._lock:
            return list(self._schedulers.values())

    def endpoints(self) -> list[dict[str, str]]:
        """Each endpoint and model the session's calls went to (for run.json): the connection,
        its address (a password in it masked) and the model; never a key. In a scale-out run,
        the driver's session holds every worker's (``leases``)."""
        from flowkit.llm.endpoint import redact_url

        found = {(s.name, redact_url(s.url), s.model) for s in self.schedulers()}
        return [{"connection": c, "url": u, "model": m} for c, u, m in sorted(found)]

    def close(self) -> None:
        """Save what the schedulers learned (if the session remembers) and close the clients
        of loops that are not running. Calls after the first do nothing."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            clients = self._clients
        try:
            if self.memory is not None:
                self.memory.save()
        finally:
            if clients is not None:
                clients.close()


current: ContextVar[LlmSession | None] = ContextVar("flowkit_llm_session", default=None)
"""The session of the run in progress in this context (None: the default session serves)."""

_default: LlmSession | None = None
_default_lock = threading.Lock()


def default_session() -> LlmSession:
    """The session of model calls made outside any run (created on first use; it remembers
    nothing on disk and joins the process's shared budgets)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = LlmSession()
        return _default


def reset_default_session() -> None:
    """Start the default session afresh: forget its schedulers and what they learned (a
    notebook whose endpoint changed). Runs are unaffected: each has its own session."""
    global _default
    with _default_lock:
        old, _default = _default, None
    if old is not None:
        old.close()


def current_session() -> LlmSession:
    """The session of the run in progress, else the default session."""
    return current.get() or default_session()


@contextlib.contextmanager
def using(session: LlmSession) -> Iterator[LlmSession]:
    """Within: model calls of this context (and the tasks and threads it starts) go through
    ``session``."""
    token = current.set(session)
    try:
        yield session
    finally:
        current.reset(token)


@contextlib.contextmanager
def run_session(
    cache_dir: Path | None,
    notes: list[str] | None = None,
    *,
    shared: SharedEndpoints | None = PROCESS,
) -> Iterator[LlmSession]:
    """A run's session, current within: endpoints open where their last run left off (the
    memory in ``cache_dir``/endpoints.json; None remembers nothing); at the end what they
    learned is merged into it, the session's clients are closed, and ``notes`` gets a sentence
    for each endpoint that opened from memory."""
    memory = EndpointMemory(cache_dir / FILE) if cache_dir is not None else None
    session = LlmSession(memory=memory, shared=shared)
    try:
        with using(session):
            yield session
    finally:
        try:
            session.close()
        finally:
            if memory is not None and notes is not None:
                notes.extend(memory.notes)


def scheduler_for(endpoint: Endpoint, model: str | None = None) -> Scheduler:
    """The current session's scheduler of ``endpoint`` and ``model`` for this thread."""
    return current_session().scheduler_for(endpoint, model)


def all_schedulers() -> list[Scheduler]:
    """Every scheduler of the current session, for run summaries."""
    return current_session().schedulers()
