"""Running rows: each data row through the DAG in dependency order, then the aggregates.

- ``executor``: rows in flight, the order of nodes within a row, and sub-flows.
- ``node_runner``: one node in one row (cache lookup, run, store, trace record); owned by the
  executor and called by it.
- ``plan``: per-flow schedules; ``scope``: a row's values; ``lookahead``: batched cache
  lookups ahead of the rows.
- ``aggregation``: aggregate nodes over all rows.
- ``collector``: Python's garbage collector, kept quiet while rows run.
- ``context``: run options, counters and the run-time context kinds receive.
- ``prepare``: binding the flow for one run (``bind``) before a row runs; ``bound``: what it
  binds, ``BoundFlow``/``BoundNode`` (each node's endpoint, model, final cache key and mode, and
  the run's timing of inline functions), owned by the run: the loaded flow is never written to.
- ``records``: the typed, versioned trace records the engine emits.
- ``sink``: ``RunSink``, the protocol the engine writes rows and records through.

Imports point down to ``flowkit.kinds``, ``flowkit.flow``, ``flowkit.cache`` and
``flowkit.errors``. The run folder it writes to is passed in as a ``RunSink`` (``flowkit.runs``
owns the implementations), the cache as a ``flowkit.cache.result_cache.ResultCache``.
"""
