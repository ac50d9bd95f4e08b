"""``python -m flowkit.cli`` runs the ``flowkit`` command."""

from __future__ import annotations

from flowkit.cli.main import main

# Guarded: worker processes that import the main module again (a local Dask cluster, spawned
# multiprocessing workers) must not run the command a second time.
if __name__ == "__main__":
    main()
