"""Where a run's cache lives: ``--cache-dir`` (or ``$FLOWKIT_CACHE_DIR``) names a folder, for
the SQLite store, or a url such as ``s3://bucket/prefix``, for the object store shared across
machines (``flowkit.cache.objects``). Both stores are a ``ResultCache``.
"""

from __future__ import annotations

import os
from pathlib import Path

from flowkit.cache.result_cache import ResultCache
from flowkit.cache.store import Cache, user_cache_dir


def is_url(location: str | os.PathLike[str] | None) -> bool:
    """Whether ``location`` names an object store (``scheme://…``) rather than a folder."""
    return location is not None and "://" in str(location)


def _chosen(location: str | None) -> str:
    return location or os.environ.get("FLOWKIT_CACHE_DIR") or str(user_cache_dir())


def open_cache(location: str | None) -> ResultCache:
    """The run's cache store: ``location``, else ``$FLOWKIT_CACHE_DIR``, else the user's."""
    chosen = _chosen(location)
    if is_url(chosen):
        from flowkit.cache.objects import ObjectCache

        return ObjectCache(chosen)
    return Cache(Path(chosen))


def local_dir(location: str | None) -> Path:
    """The folder kept beside the cache on this machine (what endpoints learned,
    flowkit.llm.memory): the cache's own folder, or the user's cache folder when the cache is
    in an object store."""
    chosen = _chosen(location)
    if is_url(chosen):
        env = os.environ.get("FLOWKIT_CACHE_DIR")
        return user_cache_dir() if env is None or is_url(env) else Path(env)
    return Path(chosen)
