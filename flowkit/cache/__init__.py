"""Node results cached by content hash.

- ``canonical``: canonical JSON, the one byte form that keys and stored values share.
- ``fingerprint``: importing a node's function (its flow's folder importable), and the
  fingerprint of the code behind it; ``load_from_folder`` does both for any front end.
- ``importpath``: a flow's folder and ``python_path`` folders, on sys.path only while it
  loads or runs (counted per holder; modules first imported from them leave with them).
- ``imports``: the project files a function's code imports, transitively (the fingerprint's
  reach, and its documented limits).
- ``result_cache``: ``ResultCache``, the protocol a run holds a cache through, and ``MISS``.
- ``store``: the SQLite store and ``node_key``, the sha256 over everything that changes a result.

Imports point down to ``flowkit.errors`` only.
"""
