"""Users' code: importing a node's function and fingerprinting the code behind it.

- ``fingerprint``: importing a node's function (its flow's folder importable), and the
  fingerprint of the code behind it; ``load_from_folder`` does both for any front end;
  ``app_fingerprint``, what a --target app is (its code, and an object's state).
- ``static``: a function read from its source (``ast``) without running it, for inspecting a
  flow (``inspect_only``: validate, describe, convert).
- ``importpath``: a flow's folder and ``python_path`` folders, on sys.path only while it
  loads or runs (counted per holder; modules first imported from them leave with them).
- ``imports``: the files of the user's code a function's code imports, transitively (the
  fingerprint's reach), and the module name each is imported under (``ModuleClaims`` refuses a
  flow tree that reaches two files under one name).
- ``state``: fingerprints of what code holds rather than a file: a ``__main__`` function (a
  notebook's cells), a closure's cells, an object's and its class's plain attributes.
- ``freshness``: the text each module of the user's code ran from; modules changed on disk
  since they ran are imported again.

Imports point down to ``flowkit.cache.canonical`` and ``flowkit.errors`` only.
"""
