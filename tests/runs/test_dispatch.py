"""Sending chunks to workers (flowkit.runs.dispatch): what is refused before a run starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import write_jsonl


@pytest.mark.parametrize(
    ("backend", "address", "what", "hint"),
    [
        (
            "ray",
            "127.0.0.1:9",
            "Ray cluster",
            "check --scheduler or RAY_ADDRESS (HOST:6379 or ray://HOST:10001), "
            "or leave both out for a local Ray",
        ),
        (
            "ray",
            "ray://127.0.0.1:9",
            "Ray cluster",
            "check --scheduler or RAY_ADDRESS (HOST:6379 or ray://HOST:10001), "
            "or leave both out for a local Ray",
        ),
        (
            "dask",
            "tcp://127.0.0.1:9",
            "Dask scheduler",
            "check --scheduler (tcp://HOST:8786), or leave it out for a local cluster",
        ),
    ],
)
def test_an_unreachable_cluster_is_refused_at_once_without_a_run_folder(
    workdir: Path, backend: str, address: str, what: str, hint: str
) -> None:
    data = write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    start = time.monotonic()
    with pytest.raises(flowkit.UsageError) as raised:
        flowkit.run("exact_match", data, backend=backend, scheduler=address)
    assert time.monotonic() - start < 5
    assert raised.value.message == (
        f"cannot reach the {what} at {address}: [Errno 111] Connection refused"
    )
    assert raised.value.hint == hint
    assert not (workdir / "runs").exists()


def test_ray_address_from_the_environment_is_checked_too(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    data = write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    with pytest.raises(flowkit.UsageError) as raised:
        flowkit.run("exact_match", data, backend="ray")
    assert raised.value.message == (
        "cannot reach the Ray cluster at 127.0.0.1:9: [Errno 111] Connection refused"
    )
    assert not (workdir / "runs").exists()


def test_a_ray_cluster_that_answers_but_refuses_the_driver_is_a_usage_error(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reachable is not joined: a cluster that needs an auth token (or runs another Ray) made
    Ray's own traceback after ~20 s, and left a failed run folder behind."""
    import socket

    ray = pytest.importorskip("ray")

    def refuse(**_: object) -> None:
        raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:6379")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    data = write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    with socket.create_server(("127.0.0.1", 0)) as listening:
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        with pytest.raises(flowkit.UsageError) as raised:
            flowkit.run("exact_match", data, backend="ray", scheduler=address)
    assert raised.value.message == (
        f"cannot connect to the Ray cluster at {address}: "
        "Failed to connect to Ray cluster at 192.0.2.2:6379"
    )
    assert "RAY_AUTH_MODE=token" in (raised.value.hint or "")
    assert not (workdir / "runs").exists()


def test_an_address_that_is_not_a_dask_scheduler_is_a_usage_error(
    workdir: Path, llm_server: LocalServer
) -> None:
    """An HTTP server where the scheduler should be (the dashboard's port): Dask read its reply
    as a frame of exabytes, and the run failed with numpy's MemoryError, leaving its folder."""
    pytest.importorskip("distributed")
    address = "tcp://" + llm_server.base_url.split("//")[1].split("/")[0]
    data = write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    with pytest.raises(flowkit.UsageError) as raised:
        flowkit.run("exact_match", data, backend="dask", scheduler=address)
    assert raised.value.message.startswith(f"cannot reach the Dask scheduler at {address}: ")
    assert "not its dashboard's" in (raised.value.hint or "")
    assert not (workdir / "runs").exists()


SCRIPT = """
import flowkit
flowkit.run("exact_match", "d.jsonl", backend="dask")
"""


@pytest.mark.slow  # a python process of its own
def test_a_script_without_a_main_guard_is_told_what_to_add(workdir: Path) -> None:
    import subprocess
    import sys

    write_jsonl(workdir / "d.jsonl", [{"answer": "a", "ground_truth": "a"}])
    (workdir / "score.py").write_text(SCRIPT)
    ran = subprocess.run(
        [sys.executable, "score.py"], cwd=workdir, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 1
    assert ran.stderr.splitlines()[-2:] == [
        "flowkit.errors.UsageError: --backend dask starts worker processes that import "
        'score.py again, and it has no `if __name__ == "__main__":`; put the run under it',
        "  hint: see https://docs.python.org/3/library/multiprocessing.html"
        "#the-spawn-and-forkserver-start-methods",
    ]
    assert not (workdir / "runs").exists()


@pytest.mark.parametrize(
    ("text", "guarded"),
    [
        ('if __name__ == "__main__":\n    main()\n', True),
        ("if '__main__' == __name__:\n    main()\n", True),
        ("def main():\n    pass\nmain()\n", False),
        ('def f():\n    if __name__ == "__main__":\n        pass\n', False),
    ],
)
def test_what_counts_as_a_main_guard(tmp_path: Path, text: str, guarded: bool) -> None:
    from flowkit.runs.preflight import _guarded

    (tmp_path / "s.py").write_text(text)
    assert _guarded(tmp_path / "s.py") is guarded


class Died(Exception):
    """A worker's death, as a backend reports it."""


def _dispatch_with_deaths(deaths: int) -> list[int]:
    """Five chunks of two rows on two threads; the chunk of rows 4-5 dies ``deaths`` times."""
    import concurrent.futures as cf
    import threading

    from flowkit.runs.dispatch import Pool, dispatch

    left, lock = [deaths], threading.Lock()

    def run(job: None, chunk: list[tuple[int, None, None]]) -> list[int]:
        with lock:
            dies = chunk[0][0] == 4 and left[0] > 0
            left[0] -= dies
        if dies:
            raise Died("gone")
        return [line for line, _, _ in chunk]

    executor = cf.ThreadPoolExecutor(2)
    pool = Pool(
        executor.submit,
        lambda err: isinstance(err, Died),
        lambda: executor.shutdown(wait=False, cancel_futures=True),
        executor.shutdown,
    )
    chunks = iter([[(i, None, None), (i + 1, None, None)] for i in range(0, 10, 2)])
    folded: list[int] = []
    try:
        dispatch(pool, run, None, chunks, 2, folded.extend)
    finally:
        executor.shutdown()
    return folded


def test_a_lost_chunk_is_sent_again_until_it_runs() -> None:
    from flowkit.runs.dispatch import RETRIES

    assert sorted(_dispatch_with_deaths(RETRIES)) == list(range(10))


def test_a_chunk_lost_more_often_than_the_retries_stops_the_run() -> None:
    from flowkit.runs.dispatch import RETRIES, WorkerLost

    with pytest.raises(WorkerLost) as raised:
        _dispatch_with_deaths(RETRIES + 1)
    assert raised.value.message == (
        f"the worker running rows 4-5 died {RETRIES + 1} times (Died); the rows that finished "
        "are kept"
    )


def test_a_future_cancelled_twice_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """Stopping the driver cancels a Dask chunk's future, then the task's callback cancels it
    again: concurrent.futures printed "Future … in unexpected state: CANCELLED_AND_NOTIFIED"
    (CRITICAL) for each chunk out, after a SIGTERM or a worker-side error."""
    import concurrent.futures as cf

    from flowkit.runs.dispatch import _cancel

    future: cf.Future[int] = cf.Future()
    with caplog.at_level("DEBUG", logger="concurrent.futures"):
        _cancel(future)
        _cancel(future)
    assert future.cancelled()
    assert [r.getMessage() for r in caplog.records] == []


def test_python_m_flowkit_cli_is_guarded() -> None:
    # `python -m flowkit.cli run … --backend dask` ran flowkit's own __main__.py as the script
    # workers import again: it was refused for lacking the guard it tells users to add.
    import flowkit.cli.__main__ as entry  # guarded: importing it runs nothing
    from flowkit.runs.preflight import _guarded

    assert entry.__file__ is not None
    assert _guarded(Path(entry.__file__))
