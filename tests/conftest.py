"""Shared fixtures: a local OpenAI-compatible server, and isolated cache, runs and working dirs.

No test touches the user's cache (FLOWKIT_CACHE_DIR points into tmp for every test) and no test
talks to anything but 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flowkit.llm.session import LlmSession, using
from flowkit.llm.shared import SharedEndpoints
from flowkit.testing.server import LocalServer, ServerConfig, serve


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A safety net: whatever a test forgets to pass, the default cache is a temporary one."""
    monkeypatch.setenv("FLOWKIT_CACHE_DIR", str(tmp_path_factory.mktemp("default-cache")))


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's tmp dir as the working directory (no stray flowkit.yaml, runs/ lands here)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture(scope="session")
def _server() -> Iterator[LocalServer]:
    with serve(ServerConfig()) as srv:
        yield srv


@pytest.fixture
def llm_session() -> Iterator[LlmSession]:
    """The model calls a test makes itself (``chat``/``embed`` outside ``flowkit.run``) in a
    session of their own, as one run's would be; each ``flowkit.run`` has its own anyway."""
    session = LlmSession(shared=SharedEndpoints())
    with using(session):
        yield session
    session.close()


@pytest.fixture
def llm_server(
    _server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch, llm_session: LlmSession
) -> LocalServer:
    """The local test server, with the environment pointing flowkit at it and fresh counters."""
    for var in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "OPENAI_API_VERSION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", _server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    monkeypatch.setenv("FLOWKIT_MODEL", "flowkit-test")
    _server.reset()
    return _server
