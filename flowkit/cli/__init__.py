"""The ``flowkit`` command: click commands, a thin skin over the Python API.

- ``group``: the command group: a user error ends as `error: …` and its exit code, and the
  commands of the other modules load only when named (a run never imports them);
- ``main``: the command group's entry point; ``run_command``: `flowkit run` and how its options
  become a RunConfig; ``flow_commands``: validate and list; ``options``: how `run` parses its
  option values (bounded numbers, ``--map`` pairs, CI files).
- ``label_commands``: agree and review, and ``--labels`` on a run.
- ``inspect_commands``: the commands that read run folders (show, runs, trace, compare, report,
  export-otel).
- ``batch_commands``: batches (a run's batches, and cancelling them).
- ``author_commands``: describe and init; ``scaffold``: the project ``init`` writes;
  ``run_end``: what a run prints when it ends.
- ``terminal``: consoles and how values are printed.

Imports point down to ``flowkit.api`` and ``flowkit.inspect``; nothing imports this package.
"""
