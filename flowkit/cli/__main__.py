"""``python -m flowkit.cli`` runs the ``flowkit`` command."""

from __future__ import annotations

from flowkit.cli.main import main

main()
