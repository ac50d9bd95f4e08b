"""Rows in: reading data files, mapping columns (and an earlier run's outputs) onto flow inputs.

- ``read``: JSONL, JSON and CSV rows with their file and line, bad rows reported, not fatal.
- ``lines``: a data file's physical lines, each capped in bytes (a huge line costs one row).
- ``jsonl``: torn-line-tolerant JSONL reading, shared with run folders.
- ``mapping``: ``${data.col}`` / ``${run.outputs.col}`` onto inputs, checked before any row.
- ``coerce``: a value made into an input's declared type.
- ``needs``: the input sets (``shapes``) a flow needs a row to fill, and the column names
  other tools (azure-ai-evaluation, Databricks, Ragas) give its inputs.

Imports point down to ``flowkit.flow`` and ``flowkit.errors``.
"""
