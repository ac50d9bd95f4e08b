"""Run folders in an object store: ``--output s3://bucket/prefix/run`` (any fsspec URL).

An object store has no append and no rename, and a run appends rows for hours, so the run
writes a local staging copy of its folder as always and uploads it: at each heartbeat of its
lease (flowkit.runs.lease, every ``ttl / 3`` seconds) the files that changed since the last
upload, traces before outputs and run.json last (the order a resume relies on locally), and
everything at the end. The lease itself lives in the store, created with ``If-None-Match``, so
a run killed on one machine is resumed on another: its folder is downloaded into that
machine's staging, resumed there and uploaded back. `show`, `compare` and `report` download a
folder to read it. fsspec (and s3fs: ``pip install 'flowkit[s3]'``) is imported only here, when
a URL is used; credentials and endpoint come from the store's own configuration (for S3 the
``AWS_*`` variables, ``AWS_ENDPOINT_URL`` for a compatible server).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from flowkit.errors import UsageError

if TYPE_CHECKING:
    from flowkit.runs.lease import Lease

STAGING_ENV = "FLOWKIT_STAGING_DIR"
"""Where remote run folders are staged (default: flowkit-runs in the temporary directory)."""
_URL = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]+):/+(.*)")
_KEEP_LOCAL = re.compile(r"\.flowkit\.lock|lease-\d+\.json|\..*|.*\.tmp")
"""Staged files never uploaded: the local lock, leases (they live in the store), temporaries."""
_ORDER = {"traces.jsonl": 0, "outputs.jsonl": 1, "run.json": 3}


def remote_url(path: str | os.PathLike[str] | None) -> str | None:
    """The URL ``path`` names (``s3://b/p``, also as a Path made of it: ``s3:/b/p``), or None
    for a local path."""
    if path is None:
        return None
    match = _URL.fullmatch(os.fspath(path))
    if match is None or match.group(1).lower() == "file":
        return None
    return f"{match.group(1)}://{match.group(2).rstrip('/')}"


def staging_dir(url: str) -> Path:
    """The local folder a remote run folder is written in, under its lease: one per URL,
    named as the run."""
    base = os.environ.get(STAGING_ENV) or os.path.join(tempfile.gettempdir(), "flowkit-runs")
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return Path(base) / digest / url.rsplit("/", 1)[-1]


@contextlib.contextmanager
def store_errors(url: str) -> Iterator[None]:
    """The store's failures before a run or a read starts (no such bucket, credentials it
    refuses, an endpoint it cannot reach) as a usage error naming the URL, not a traceback."""
    try:
        yield
    except OSError as err:
        raise UsageError(
            f"{url}: the object store failed: {err or type(err).__name__}",
            hint="check that the bucket exists and the store's settings (for S3 the AWS_* "
            "variables: credentials, AWS_ENDPOINT_URL for a compatible server)",
        ) from None


def read_copy(url: str) -> Path:
    """A copy of a remote run folder to read (`show`, `compare`): a folder of its own, never
    the staging a run may be writing, removed when the process ends."""
    global _reads
    if _reads is None:
        _reads = tempfile.mkdtemp(prefix="flowkit-read-")
        atexit.register(shutil.rmtree, _reads, True)
    into = Path(tempfile.mkdtemp(dir=_reads)) / url.rsplit("/", 1)[-1]
    with store_errors(url):
        return RemoteFolder(url, into).download()


_reads: str | None = None


def is_read_copy(path: Path) -> bool:
    """Whether ``path`` is in a copy :func:`read_copy` made (removed when the process ends)."""
    return _reads is not None and Path(_reads) in path.resolve().parents


def find_run(base: str, run: str) -> str:
    """The URL of run ``run`` (a name, or a unique start of one) under ``base``."""
    with store_errors(base):
        names = RemoteFolder(base).names()
    if run in names:
        return f"{base}/{run}"
    candidates = sorted(n for n in names if n.startswith(run))
    if len(candidates) == 1:
        return f"{base}/{candidates[0]}"
    if candidates:
        shown = ", ".join(candidates[:5])
        raise UsageError(f"run {run!r} is ambiguous: {shown}", hint="give more of the name")
    raise UsageError(f"no run folder {run!r} in {base}", hint="give the run's full URL")


class RemoteFolder:
    """A run folder in an object store: its lease's place (flowkit.runs.lease.Place) and the
    store side of its staging copy."""

    def __init__(self, url: str, staging: Path | None = None) -> None:
        try:
            import fsspec
        except ImportError:  # pragma: no cover (a dev install has it)
            raise UsageError(
                f"{url}: run folders in an object store need fsspec",
                hint="pip install 'flowkit[s3]'",
            ) from None
        try:
            # A file system of its own: a cached one may point at another endpoint by now.
            self.fs, self.root = fsspec.core.url_to_fs(url, skip_instance_cache=True)
        except (ImportError, ValueError) as err:
            raise UsageError(f"{url}: {err}", hint="pip install 'flowkit[s3]'") from None
        self.where = url
        self.staging = staging or staging_dir(url)
        self._sent: dict[str, tuple[int, int]] = {}
        self._last = 0.0

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    # -- the lease's place -----------------------------------------------------------------
    def read(self, name: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(name)))
        except FileNotFoundError:
            return None

    def create(self, name: str, data: bytes) -> bool:
        try:
            self.fs.pipe_file(self._path(name), data, mode="create")
        except FileExistsError:
            return False
        return True

    def replace(self, name: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(name), data)

    def names(self) -> list[str]:
        try:
            found = self.fs.ls(self.root, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in found]

    # -- the staging copy ------------------------------------------------------------------
    def download(self) -> Path:
        """A fresh staging copy of the folder (its leases too, for `show`)."""
        names = self.names()
        if "run.json" not in names:
            raise UsageError(
                f"no run folder {self.where!r} (no run.json there)",
                hint="give the URL of the run's folder, or its name with --runs-dir URL",
            )
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True)
        for name in names:
            if not name.endswith("/") and self.fs.isfile(self._path(name)):
                self.fs.get_file(self._path(name), str(self.staging / name))
        self._sent = {n: _stamp(self.staging / n) for n in names if (self.staging / n).is_file()}
        return self.staging

    def check_new(self, overwrite: bool) -> None:
        """A new run's folder in the store: one that holds anything is refused without
        ``overwrite``, as a local one is."""
        held = [n for n in self.names() if not _KEEP_LOCAL.fullmatch(n)]
        if held and not overwrite:
            what = "holds a run" if "run.json" in held else "is not empty"
            raise UsageError(
                f"run folder {self.where!r} already exists and {what}",
                hint="choose another --output or --name, or --overwrite (overwrite=True in Python)",
            )

    def clear(self) -> None:
        """Under the new run's lease: the store's run files and any old staging go."""
        from flowkit.runs.folder import RUN_FILES

        for name in set(self.names()) & set(RUN_FILES):
            self.fs.rm_file(self._path(name))
        shutil.rmtree(self.staging, ignore_errors=True)

    def upload(self, *, every: float = 0.0) -> None:
        """Upload the staged files that changed since the last upload, unless one was made
        less than ``every`` seconds ago."""
        now = time.monotonic()
        if now - self._last < every:
            return
        self._last = now
        staged = [p for p in self.staging.iterdir() if p.is_file()]
        for path in sorted(staged, key=lambda p: (_ORDER.get(p.name, 2), p.name)):
            stamp = _stamp(path)
            if _KEEP_LOCAL.fullmatch(path.name) or self._sent.get(path.name) == stamp:
                continue
            self.fs.put_file(str(path), self._path(path.name))
            self._sent[path.name] = stamp

    def checkpoint(self, every: float) -> None:
        """:meth:`upload` while the run goes on: a store down for a moment is tried again at
        the next heartbeat, and the end's upload sends everything anyway."""
        with contextlib.suppress(OSError):
            self.upload(every=every)

    def finish(self) -> None:
        """The last upload, which must succeed: the run is only in staging until it does."""
        try:
            self.upload()
        except OSError as err:
            raise UsageError(
                f"could not upload the run to {self.where}: {err}",
                hint=f"the run is complete in {self.staging}; copy it there when the store is back",
            ) from None


def claim_remote(url: str, overwrite: bool) -> tuple[RemoteFolder, Lease, BinaryIO]:
    """A new run's folder in the store: checked (as a local one is), leased, cleared, and its
    staging copy claimed; the lease is the caller's to release if the run never starts."""
    from flowkit.runs.folder import claim_run_dir
    from flowkit.runs.lease import take

    remote = RemoteFolder(url, staging_dir(url))
    with store_errors(url):
        remote.check_new(overwrite)
        lease = take(remote, url.rsplit("/", 1)[-1], "run")
    try:
        with store_errors(url):
            remote.clear()
        return remote, lease, claim_run_dir(remote.staging, overwrite=True)
    except BaseException:
        lease.release()
        raise


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns
