"""Prompt Flow's ``additional_includes:``: files and folders from elsewhere that the flow's tools
use as if they lay beside ``flow.dag.yaml``.

Prompt Flow copies each listed path (relative to the flow's folder, or absolute) into a snapshot
of the folder under its own name, a folder merged with its contents, before it runs the flow.
flowkit copies nothing: a node's ``source.path`` that the folder lacks is looked up among the
includes by the same rule (``helper.py`` for an included file ``../common/helper.py``,
``utils/x.py`` for an included folder ``../common/utils``), and each include's parent folder goes
on the flow's ``python_path``, so ``import helper`` and ``import utils.x`` find them. A path that
does not exist is an error, as in Prompt Flow; the flow's own files come first where names
collide (Prompt Flow lets the include overwrite them, with a warning). Prompt Flow's zipped
includes (``folder.zip`` for a folder it compresses) are not supported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class Includes:
    """The includes of one flow folder, by the name each takes beside the flow."""

    def __init__(self, folder: Path, listed: Any) -> None:
        self.folder = folder
        self.by_name: dict[str, Path] = {}
        self.problems: list[tuple[int, str]] = []
        """(index in the list, message) for each include that cannot be honoured."""
        items = listed if isinstance(listed, list) else [] if listed is None else [listed]
        if listed is not None and not isinstance(listed, list):
            self.problems.append((0, "additional_includes must be a list of paths"))
            return
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                self.problems.append((i, f"additional include {item!r} is not a path"))
                continue
            path = Path(item) if Path(item).is_absolute() else (folder / item)
            path = Path(os.path.normpath(path))
            if item.endswith(".zip") and not path.exists():
                self.problems.append(
                    (i, f"additional include {item!r}: zipped includes are not supported")
                )
            elif not path.exists():
                self.problems.append((i, f"unable to find additional include {item!r}"))
            else:
                self.by_name[path.name] = path

    def resolve(self, relative: str) -> Path | None:
        """Where ``relative`` (a path in the flow's folder) is when the folder lacks it and an
        include provides it; None when none does."""
        parts = Path(relative).parts
        if not parts:
            return None
        found = self.by_name.get(parts[0])
        if found is None:
            return None
        inside = found.joinpath(*parts[1:]) if len(parts) > 1 else found
        return inside if inside.is_file() else None

    def relative(self, path: Path) -> str:
        """``path`` as the converted flow names it: relative to the flow's folder."""
        return Path(os.path.relpath(path, self.folder)).as_posix()

    def python_path(self) -> list[str]:
        """The folders to import the includes from (each include's parent), in list order."""
        parents = dict.fromkeys(self.relative(p.parent) for p in self.by_name.values())
        return [p for p in parents if p != "."]
