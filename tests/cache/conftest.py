"""An S3-compatible server for the object-store cache's tests: moto's, started by the tests on
127.0.0.1 (never a real cloud), with s3fs talking to it through the standard AWS variables."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    server_module = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables a user sets for an S3-compatible store, set for this test; returned so a
    test can hand them to a process of its own."""
    env = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def s3_fs(env: dict[str, str]) -> Any:
    """s3fs's file system for moto's server: the instance flowkit's object store uses too (one
    S3 client per process: making one costs most of a second)."""
    import fsspec

    return fsspec.filesystem("s3", endpoint_url=env["AWS_ENDPOINT_URL"])


@pytest.fixture
def s3_url(s3_env: dict[str, str]) -> str:
    """A fresh bucket's prefix: s3://bucket-N/cache."""
    bucket = f"flowkit-test-{next(_buckets)}"
    s3_fs(s3_env).mkdir(bucket)
    return f"s3://{bucket}/cache"
