"""Running Prompt Flow DAG flows (a folder with `flow.dag.yaml`) as flowkit flows, unchanged.

The whole compatibility layer lives here; flowkit's core knows only generic features
(`upstream_skipped`, `output: text`, `role_markers: promptflow`, `metrics: logged`, `json`
inputs, foreign flow files in ``flowkit.flow.formats``).

- ``dag``: translates `flow.dag.yaml` and its folder into a flowkit flow mapping (with lines),
  which the ordinary loader then checks and compiles; also writes it out for `flowkit convert`.
- ``rules``: Prompt Flow's reading of the file, from its source: the keys it reads (others are
  ignored with a note), flow output references, requirements lines.
- ``variants``: `node_variants` / `use_variants`, the variant a run takes (`--variant`);
  ``variant_runs``: `flowkit run --variant` / `--variants all` (native `variants:` too), whose
  options are in ``variant_options``.
- ``includes``: `additional_includes:`, the files and folders a flow's tools use as if they
  lay beside it (looked up, never copied).
- ``toolscan``: finds a code file's one `@tool` function without importing it.
- ``shim``: the folder put on the import path (last, so a real Prompt Flow wins) that provides
  the `promptflow` modules flows import: ``tool``, ``log_metric``, connections, chat helpers.
- ``connections``: connection objects built from flowkit's configuration, and model calls made
  from inside python tools, routed through flowkit.llm's scheduler.
- ``habits``: the Prompt Flow CLI habits: column mappings, run.yml, Prompt Flow run folders.
"""
