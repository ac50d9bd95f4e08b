"""The row-independent part of a node's cache key: its spec (less what cannot change its
result, such as its name, wiring and cache settings), what its kind adds (``key_parts``), and the
environment variables it declares with ``cache: {env: [...]}``.

``flowkit.cache.store`` completes it with the row's inputs (``node_key``).
"""

from __future__ import annotations

import hashlib
import os

from flowkit.cache.canonical import canonical_bytes
from flowkit.flow.graph import Node
from flowkit.flow.spec import CacheSpec
from flowkit.flow.use import path_fields

_KEY_EXCLUDE = {"name", "inputs", "when", "cache", "description"}
"""What never changes a node's result; nor do its kind's path fields (the file's content is in
``key_parts``, and the same file may be reached by another path)."""


def static_key(node: Node) -> str:
    """The part of a node's cache key that does not depend on the row."""
    exclude = _KEY_EXCLUDE.union(path_fields(node.kind))
    spec = node.spec.model_dump(mode="json", exclude=exclude)
    parts = {"spec": spec, **node.key_parts}
    if isinstance(node.spec.cache, CacheSpec) and node.spec.cache.env:
        # Read once, at load: the run uses the environment it was started in.
        parts["env"] = {var: os.environ.get(var) for var in node.spec.cache.env}
    return hashlib.sha256(canonical_bytes(parts)).hexdigest()
