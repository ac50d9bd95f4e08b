"""A run's own labels: ``RUN/labels.jsonl``, keyed by line, one label per line.

Each label carries a ``label_id``; appending is idempotent (a label whose id is already there is
not written again) and every append is flushed and fsynced before it returns, so a refresh, a
crash or two writers lose nothing and duplicate nothing. ``flowkit review`` writes here, and so
does ``run --labels`` (the file's labels, matched to rows). ``read.read_labels`` reads it back
(undo lines withdraw a label; a later label replaces an earlier one of the same row, output and
annotator).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from flowkit.labels.read import Labels

RUN_LABELS = "labels.jsonl"
"""A run's own labels, keyed by line: written by `flowkit review` and by `run --labels`."""


def keep_with_run(run_dir: Path, labels: Labels, source: Path) -> int:
    """Append ``labels`` (matched to rows) to ``RUN/labels.jsonl`` keyed by line, so compare,
    review and the report find them; each carries an id derived from what it says, so doing
    it twice (a resume) adds nothing. Returns the labels added."""
    path = run_dir / RUN_LABELS
    if path.exists() and path.resolve() == source.resolve():
        return 0
    have = written_ids(path)
    added = []
    for name, output in labels.outputs.items():
        for line, votes in output.human.items():
            for annotator, value in votes.items():
                record = {"line": line, "annotator": annotator, name: value}
                digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
                label_id = f"file-{digest[:16]}"
                if label_id not in have:
                    added.append({"label_id": label_id, **record, "source": str(source)})
    append(path, added)
    return len(added)


def append(path: Path, records: list[dict[str, Any]]) -> None:
    """Append records as JSON lines and fsync them before returning."""
    if not records:
        return
    with open(path, "a+b") as f:
        torn = f.tell() > 0 and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n"
        text = "".join(json.dumps(r) + "\n" for r in records)
        f.write((("\n" if torn else "") + text).encode())  # a torn line stays alone
        f.flush()
        os.fsync(f.fileno())


def written_ids(path: Path) -> set[str]:
    """The ids in the file; an undo line counts as ``<id>:undo``, so it too is written once."""
    return {
        str(r["label_id"]) + (":undo" if r.get("undo") else "")
        for r in _lines(path)
        if "label_id" in r
    }


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for text in path.read_text("utf-8").splitlines():
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # a torn last line
    return out
