"""Flow files written for other tools, translated into a flow's YAML before it is checked.

A foreign format is known by the name of its flow file; a folder holding such a file is that
flow. The module named for it turns the file into the same mapping a flowkit flow file parses to
(with lines, so that every error still names file:LINE), and from there the flow is loaded,
checked, cached and run like any other. Formats are imported only when a path needs one.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

FOREIGN_FILES = {"flow.dag.yaml": "flowkit.pfcompat.dag"}
"""Flow file name → the module with ``translate(path, ctx) -> YDict | None``."""


def foreign_file(path: Path) -> Path | None:
    """The foreign flow file ``path`` is or holds, if any."""
    if path.is_dir():
        for name in FOREIGN_FILES:
            if (path / name).is_file():
                return path / name
        return None
    return path if path.name in FOREIGN_FILES else None


def translator(file: Path) -> Any:
    """The module that translates ``file`` (a path :func:`foreign_file` returned)."""
    return importlib.import_module(FOREIGN_FILES[file.name])
