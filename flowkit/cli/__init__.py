"""The ``flowkit`` command: click commands, a thin skin over the Python API.

- ``main``: the group and the commands that load or run flows (run, validate, list);
  ``options``: how `run` parses its option values (bounded numbers, ``--map`` pairs).
- ``inspect_commands``: the commands that read run folders (show, runs, trace, compare, report,
  export-otel).
- ``terminal``: consoles and how values are printed.

Imports point down to ``flowkit.api`` and ``flowkit.inspect``; nothing imports this package.
"""
