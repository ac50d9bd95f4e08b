"""Users' code: importing a node's function and fingerprinting the code behind it.

- ``fingerprint``: importing a node's function (its flow's folder importable), and the
  fingerprint of the code behind it; ``load_from_folder`` does both for any front end.
- ``importpath``: a flow's folder and ``python_path`` folders, on sys.path only while it
  loads or runs (counted per holder; modules first imported from them leave with them).
- ``imports``: the project files a function's code imports, transitively (the fingerprint's
  reach).

Imports point down to ``flowkit.errors`` only.
"""
