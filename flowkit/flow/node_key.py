"""The row-independent part of a node's cache key: its spec (less what cannot change its
result, such as its name, wiring, cache settings and whether it runs in a thread), what its
kind adds at load (``key_parts``: code, prompt, sub-flow, and the environment variables it
declares with ``cache: {env: [...]}``), and what a run adds (the model; see
flowkit.engine.prepare).

``flowkit.cache.store`` completes it with the row's inputs (``node_key``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from flowkit.cache.canonical import canonical_bytes
from flowkit.flow.graph import EMPTY, Node
from flowkit.flow.spec import CacheSpec
from flowkit.flow.use import path_fields

_KEY_EXCLUDE = {"name", "inputs", "when", "cache", "description", "blocking"}
"""What never changes a node's result; nor do its kind's path fields (the file's content is in
``key_parts``, and the same file may be reached by another path)."""


def declared_env(spec: Any) -> dict[str, Any]:
    """The key part of the environment variables the node declares, as they are now (read at
    load for the flow's content hash, and again by each run for its keys); empty without."""
    if isinstance(spec.cache, CacheSpec) and spec.cache.env:
        return {"env": {var: os.environ.get(var) for var in spec.cache.env}}
    return {}


def static_key(node: Node, run_parts: Mapping[str, Any] = EMPTY) -> str:
    """The part of a node's cache key that does not depend on the row: with ``run_parts``,
    this run's (see flowkit.engine.bound)."""
    exclude = _KEY_EXCLUDE.union(path_fields(node.kind))
    spec = node.spec.model_dump(mode="json", exclude=exclude)
    parts = {"spec": spec, **node.key_parts, **run_parts}
    return hashlib.sha256(canonical_bytes(parts)).hexdigest()
