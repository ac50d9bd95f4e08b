"""A flow sent to workers by content: its files' text, or a built-in flow's name.

Workers used to load the flow from the driver's absolute paths, so a worker on another machine
(or in a container with other mounts) needed the same files at the same paths, and a built-in
flow failed on a worker whose flowkit is installed elsewhere. Now the driver packs what the
flow is made of and the worker unpacks it into a folder of its own, keyed by its digest, then
loads it from there with the same relative layout:

- a built-in flow (one of flowkit's own flows) travels by name; the worker resolves it in its
  own installed flowkit (the flow's content hash still has to match the driver's);
- a flow file travels with the files it is made of: the YAML of the flow and of its sub-flows,
  their prompt files and ``use:`` node files, the python files behind its code fingerprint,
  and the flow-like files (YAML, prompts, python, JSON, text) in each flow file's folder and
  the folders below it, two levels deep, for files its code reads beside it.

Files of flowkit itself and of installed packages are never sent: the worker has its own.

A run with ``--target`` sends its app by content too: the app's code files (those its code
fingerprint reads), and the folder the target is named relative to (``base``) as a place
among the files, where the worker finds ``app.py:answer``, ``app:answer`` or an app flow
``app.yaml`` as the driver found it in its working directory.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flowkit.errors import UsageError

if TYPE_CHECKING:
    from flowkit.flow.graph import Flow

KINDS = frozenset({".yaml", ".yml", ".jinja2", ".j2", ".prompty", ".py", ".json", ".txt", ".md"})
"""Files of a flow's folder sent with it besides those the flow names."""
SKIP = frozenset({"__pycache__", "runs", "node_modules", "site-packages"})
DEPTH = 2
"""Folders below a flow file's folder whose files are sent too."""
MAX_FILE = 1 << 20
"""A folder's file larger than this is not sent (data, not flow)."""
MAX_TOTAL = 32 << 20
"""A flow whose files come to more than this is refused: every chunk carries them."""


@dataclass(frozen=True)
class FlowBundle:
    """The flows of a run as a worker loads them: names of built-in flows, or paths within
    ``files`` (relative to the root the files have in common)."""

    entries: tuple[tuple[str, str], ...]
    """Per flow of the run: ("builtin", name) or ("file", relative path)."""
    files: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    """Relative path → content of every file sent."""
    digest: str = ""
    """sha256 over the files: the folder a worker unpacks them into."""
    folder: str = ""
    """The name of the root the files have in common, kept on the worker: a flow without a
    `name:` is named after its folder (flow.dag.yaml)."""
    base: str | None = None
    """``--target``'s folder (the driver's working directory) relative to the files' root:
    where the worker looks for the app. None when the run has no target."""


def pack(flow: Flow) -> FlowBundle:
    """The flow ``flow`` was loaded from (its ``sources``), by content."""
    from flowkit.flow.builtin import builtin_dirs

    builtins = [d.resolve() for d in builtin_dirs()]
    entries: list[tuple[str, Path | str]] = []
    for source in flow.sources:
        path = Path(source).resolve()
        if any(path.parent == d for d in builtins):
            entries.append(("builtin", path.stem))
        else:
            entries.append(("file", path))
    target = flow.target
    sent = any(k == "file" for k, _ in entries) or target is not None
    files = _files(flow, builtins) if sent else []
    if not files:
        return FlowBundle(tuple((k, str(v)) for k, v in entries))
    base = Path(target.base).resolve() if target is not None else None
    root = Path(os.path.commonpath([str(f.parent) for f in files] + ([str(base)] if base else [])))
    contents = tuple(sorted((f.relative_to(root).as_posix(), f.read_bytes()) for f in files))
    total = sum(len(text) for _, text in contents)
    if total > MAX_TOTAL:
        raise UsageError(
            f"the flow's files under {root} come to {total:,} bytes; workers get a flow by "
            f"content, at most {MAX_TOTAL:,} bytes",
            hint="move data files out of the flow's folder (they are read by the driver)",
        )
    digest = hashlib.sha256()
    for name, text in [(root.name, b""), *contents]:
        digest.update(name.encode() + b"\0" + hashlib.sha256(text).digest())
    return FlowBundle(
        tuple(
            (kind, Path(value).relative_to(root).as_posix() if kind == "file" else str(value))
            for kind, value in entries
        ),
        contents,
        digest.hexdigest(),
        root.name,
        base.relative_to(root).as_posix() if base is not None else None,
    )


def _files(flow: Flow, builtins: list[Path]) -> list[Path]:
    from flowkit.code.imports import is_flowkit_or_installed
    from flowkit.engine.prepare import walk_nodes

    found: dict[Path, None] = {}
    flows = [flow, *(node.impl for _, node, _ in walk_nodes(flow) if node.kind == "flow")]
    for each in flows:
        found[Path(each.path).resolve()] = None
        for node in each.nodes.values():
            prompt = getattr(node.spec, "prompt", None)
            if node.kind == "llm" and isinstance(prompt, str):
                found[(Path(each.path).parent / prompt).resolve()] = None
        found.update(dict.fromkeys(_node_files(Path(each.path))))
    found.update(dict.fromkeys(Path(file).resolve() for file, _ in flow.code_files))
    for folder in {Path(each.path).resolve().parent for each in flows}:
        found.update(dict.fromkeys(_beside(folder)))
    return [
        f
        for f in found
        if f.is_file()
        and not is_flowkit_or_installed(f)
        and not any(f.is_relative_to(d) for d in builtins)
    ]


def _node_files(path: Path) -> list[Path]:
    """The node files the flow file ``path`` names in `use:` (a built-in node's excepted):
    they may lie outside its folder, like its prompts (``use: ../nodes/judge.yaml``)."""
    from flowkit.flow.builtin import BUILTIN_PREFIX
    from flowkit.flow.source import read_yaml

    try:
        raw = read_yaml(path, str(path))
    except Exception:  # it loaded on the driver; a file that changed since is the worker's
        return []
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    return [
        (path.parent / node["use"]).resolve()
        for node in (nodes if isinstance(nodes, list) else ())
        if isinstance(node, dict)
        and isinstance(node.get("use"), str)
        and not node["use"].startswith(BUILTIN_PREFIX)
    ]


def _beside(folder: Path, depth: int = DEPTH) -> list[Path]:
    """The flow-like files in ``folder`` and the folders below it, ``depth`` levels deep."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name in SKIP:
            continue
        if entry.is_dir() and not entry.is_symlink() and depth > 0:
            if not _is_cache(entry):
                found += _beside(entry, depth - 1)
        elif entry.suffix in KINDS and entry.is_file() and entry.stat().st_size <= MAX_FILE:
            found.append(entry.resolve())
    return found


def _is_cache(folder: Path) -> bool:
    """A flowkit cache folder (``--cache-dir`` inside the project): results and endpoint memory,
    never part of a flow, and written to while the run goes on."""
    return (folder / "cache.sqlite").exists() or (folder / "endpoints.json").exists()


def unpack(bundle: FlowBundle) -> list[str]:
    """Write the bundle's files (once per digest) into this machine's temporary folder; the
    flows to load, as ``load_flows`` takes them."""
    if not bundle.files:
        return [value for _, value in bundle.entries]
    top, root = _root(bundle)
    if not (top / ".complete").is_file():
        for name, text in bundle.files:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            # Another worker on this machine may write it too: a process, or a thread of this
            # one (the threading backend's), so the partial file is this thread's own.
            partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
            partial.write_bytes(text)
            os.replace(partial, path)
        (top / ".complete").touch()
    return [str(root / value) if kind == "file" else value for kind, value in bundle.entries]


def _root(bundle: FlowBundle) -> tuple[Path, Path]:
    """Where ``unpack`` writes the bundle's files: its folder, and their root within."""
    top = Path(tempfile.gettempdir()) / "flowkit-flows" / bundle.digest
    return top, (top / bundle.folder if bundle.folder else top)


def target_base(bundle: FlowBundle) -> Path | None:
    """Where the unpacked files hold ``--target``'s folder (call after ``unpack``); None when
    the app was not sent (no target, or an app the worker has installed)."""
    if bundle.base is None or not bundle.files:
        return None
    return _root(bundle)[1] / bundle.base
