"""What a flow *is*: its spec, its YAML source with lines, and everything checked before a run.

- ``spec``: the pydantic models of a flow file; a node is validated by the model its kind
  names (``NodeSpec`` subclasses, ``parse_node``).
- ``source``: YAML read with the line of every key, and the size caps on it.
- ``refs``: ``${inputs.x}``, ``${node.output.field}`` and ``${data.col}`` references.
- ``loader``: loading and validating a flow completely, collecting every problem; ``compose``:
  several flows run as one.
- ``node_key``: the row-independent part of a node's cache key (``static_key``).
- ``use``: merging ``use:`` nodes; ``wiring``: reference, output and metric-key checks.
- ``declared``: the keys a node's function declares it returns (``@returns_keys``).
- ``spec_messages``: pydantic's complaints turned into ``file:LINE: node 'x': …``.
- ``graph``: the loaded flow and its DAG (networkx), frozen values any number of runs share;
  ``templates``: sandboxed Jinja2 prompts.
- ``builtin``: finding the built-in flows by name.
- ``target``: ``--target``, a metric flow preceded by a node that calls the user's app.
- ``variants``: an llm node's `variants:` (prompts, models, params), the one a load takes.
- ``settings``: per-flow settings (``--map groundedness.threshold=4``) on a run of several
  flows or a suite, each a run input wired to the sub-flow nodes it names.
- ``reload``: ``fresh``, a loaded flow loaded again when code behind it changed on disk.

Imports point down to ``flowkit.code``, ``flowkit.cache`` and ``flowkit.errors`` only. Node
kinds are an extension point: the loader looks them up through ``flowkit.kinds`` when it compiles
a node, and the kinds import this package, never the other way at import time.
"""
