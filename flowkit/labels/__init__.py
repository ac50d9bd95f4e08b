"""People's labels and what they say about a run's judges.

- ``read``: a labels file (JSONL, or the data's own ``human_*`` columns) paired with a run's
  rows by a key column; several annotators; unmatched labels kept for reporting.
- ``agreement``: the agreement formulas (κ, weighted κ, Spearman, Kendall, confusion,
  Krippendorff's α) and their intervals, tested against scikit-learn, scipy and krippendorff.
- ``estimates``: judge-only, labels-only and prediction-powered (PPI++) means with 95%
  intervals, tested against ``ppi_py``; the label budget.
- ``bias``: the length probe and the pairwise position-swap probe.
- ``summary``: what ``flowkit agree`` prints and the ``….corrected`` keys of metrics.json.

Needs numpy (``flowkit[stats]``). Imports point down to ``flowkit.runs`` (reading run folders).
"""
