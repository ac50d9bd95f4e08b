"""Sending chunks to workers (flowkit.runs.dispatch): what is refused before a run starts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import flowkit
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
