"""``flowkit review RUN``: label a run's rows in the browser, one at a time, by keyboard.

- ``rows``: the rows, the output being labelled, the draw (random, by judge score, by judges'
  disagreement) and the state a page resumes from (labels, progress, label budget).
- ``server``: the aiohttp app (127.0.0.1, a token in the URL) that serves ``page.html`` and
  appends each label, fsynced and idempotent by its id, to ``RUN/labels.jsonl``.

Imports point down to ``flowkit.labels`` and ``flowkit.runs``.
"""
