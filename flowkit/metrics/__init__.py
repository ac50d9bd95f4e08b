"""What the built-in metric flows call: pure functions over values, no run machinery.

- ``aggregate``: means, pass rates and defect rates over all rows.
- ``severity``: severity labels and levels (lowest first), as ``defect_rate`` reads them.
- ``keys``: ``@returns_keys``, the metric keys an aggregate function declares (for ``--gate``).
- ``text``: F1, exact match, token counts, embedding similarity.
- ``retrieval``: document recall and precision.
- ``safety``: severity transcripts and defect rates by group.
- ``judges``: turning judge replies into per-row results (chunk precision, intents, turns).
- ``scores``: ``parse_score``, reading a score from a judge's reply; ``score_forms``: the forms
  and their readers; ``score_modes``: which readers each mode tries; ``verdicts``: yes/no
  verdicts, read from the reply's first word and invalid when it names both.
- ``adapters``: reshaping data fields (chunks, histories, requests) into prompt text.
- ``conversations``: per-turn scoring of the quality flows (one judge call per reply).
- ``classification``: label accuracy, per-class counts and macro F1.
- ``names``: metric names made from values (labels, groups), never one name for two values.
- ``traces``: reading MLflow traces (response, retrieved context, latency, tokens).

Imports point down to ``flowkit.errors`` only.
"""
