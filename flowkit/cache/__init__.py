"""Node results cached by content hash (the code fingerprint that enters a key is
``flowkit.code``'s).

- ``canonical``: canonical JSON, the one byte form that keys and stored values share.
- ``result_cache``: ``ResultCache``, the protocol every store implements (SQLite, object store,
  a worker's in memory), the entry encoding, and ``MISS``; ``Elsewhere``, a cache that can
  look a missed key up in another store.
- ``store``: the SQLite store and ``node_key``, the sha256 over everything that changes a result.
- ``memory``: ``MemoryCache``, a scale-out worker's cache, seeded with the driver's entries,
  asking the driver's store for a key it misses before a node that waits is paid for.
- ``objects``: ``ObjectCache``, the cache in an object store (S3 and compatible, through fsspec)
  that drivers on several machines share.
- ``location``: where a run's cache lives (``--cache-dir``: a folder or an ``s3://`` url), and
  opening its store.

Imports point down to ``flowkit.errors`` only; fsspec and s3fs are imported only for a url.
"""
