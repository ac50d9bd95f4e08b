"""Node results cached by content hash (the code fingerprint that enters a key is
``flowkit.code``'s).

- ``canonical``: canonical JSON, the one byte form that keys and stored values share.
- ``result_cache``: ``ResultCache``, the protocol a run holds a cache through, and ``MISS``.
- ``store``: the SQLite store and ``node_key``, the sha256 over everything that changes a result.
- ``memory``: ``MemoryCache``, a scale-out worker's cache, seeded with the driver's entries.

Imports point down to ``flowkit.errors`` only.
"""
