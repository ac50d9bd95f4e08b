"""Reading runs back: summaries, traces, comparisons, gates, the HTML report, OpenTelemetry.

- ``show``: the summary of a run and the metrics table.
- ``trace_view``: per-row, per-node traces, filtered by ``--where``.
- ``compare``: paired bootstrap deltas between two runs; ``compare_rows`` reads and pairs
  the rows into columns (numbers, and short labels such as "pass"/"fail"); ``compare_means``:
  each metric of metrics.json's interval and verdict, or why it has none (a mean from the
  per-row values or a stored stdev and count); ``compare_rates``: a rate's (its per-row 0/1
  rows paired, Newcombe's interval apart, or the stored counts); ``intervals``: the bootstrap,
  Wilson and Newcombe intervals and ``verdict``, the one rule every verdict comes from;
  ``comparison``: ``flowkit.compare`` and ``RunResult.compare``, the same as tables for pandas
  and notebooks.
- ``gates``: ``--gate`` conditions on metrics, and the condition parser ``--where`` shares.
- ``regression``: ``--gate-drop``/``--fail-if``, gates on the change from a baseline run, each
  verdict with its paired interval; ``ci_report``: the markdown summary and JUnit XML of them.
- ``report`` and ``report_data``: the self-contained HTML page (``report_page.*``);
  ``report_format``: how the page writes metrics, deltas, durations and times.
- ``otel``, ``otel_spans`` and ``otel_plan``: exporting a run's traces as OpenTelemetry spans.

Imports point down to ``flowkit.runs`` and ``flowkit.engine.records``; nothing here runs a flow.
"""
