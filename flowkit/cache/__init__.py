"""Node results cached by content hash.

- ``canonical``: canonical JSON, the one byte form that keys and stored values share.
- ``fingerprint``: importing a node's function, and the fingerprint of the code behind it.
- ``store``: the SQLite store and ``node_key``, the sha256 over everything that changes a result.

Imports point down to ``flowkit.errors`` only.
"""
