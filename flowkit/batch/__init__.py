"""Batch mode (``flowkit run --batch``): a run's llm calls through the provider's batch API, at
its lower price, with the run's waves, records and resume.

- ``collector``: ``BatchCollector``, where the run's chat calls go instead of the endpoint; it
  sends the calls that became ready together as one batch when every row waits (a wave of the
  DAG), polls, and answers each call with its reply (or sends it again after a failure).
- ``progress``: what the progress line says while batches run (with the time left).
- ``wire``: the file formats (request lines, the output and error files), ``custom_id``s and
  the provider's limits per batch.
- ``records``: ``batches.jsonl`` in the run folder, each batch written down before it is
  created, so that no batch is lost and no call paid twice across kills and resumes.
- ``lookup``: the provider's side: a batch found by its record's nonce, why one failed.
- ``commands``: what ``flowkit batches RUN`` lists and cancels.

Imports point down to ``flowkit.llm`` (the session's clients, the reply checks); ``flowkit.runs``
sets a collector up for a run in batch mode, and the session routes calls to it.
"""
