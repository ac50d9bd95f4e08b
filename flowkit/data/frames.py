"""Data given in memory — a pandas DataFrame or a list of dicts — written out as JSONL.

A run reads its data as a stream from a file, and ``--resume`` needs that file again later, so
in-memory data is written once into the run folder (``data.jsonl``) and then read like any
other data file. pandas is never imported here: a DataFrame is recognised by what it offers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError

DATA_FILE = "data.jsonl"


def is_in_memory(data: Any) -> bool:
    """Whether ``data`` is rows in memory rather than a path to a data file."""
    return not isinstance(data, (str, os.PathLike))


def write_rows(data: Any, path: Path) -> int:
    """Write a DataFrame or a list of dicts to ``path`` as JSONL; return the row count."""
    if _is_frame(data):
        # pandas knows its own types (numpy numbers, NaN → null, timestamps → ISO text).
        data.to_json(path, orient="records", lines=True, date_format="iso", force_ascii=False)
        return len(data)
    if isinstance(data, (list, tuple)):
        bad = next((i for i, row in enumerate(data) if not isinstance(row, dict)), None)
        if bad is not None:
            raise UsageError(
                f"data row {bad} is a {type(data[bad]).__name__}, not a dict",
                hint="pass a list of dicts, one per row, keyed by column name",
            )
        with path.open("w", encoding="utf-8") as out:
            for row in data:
                out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return len(data)
    raise UsageError(
        f"data must be a path, a pandas DataFrame or a list of dicts, not {type(data).__name__}",
        hint="e.g. flowkit.run(flow, 'data.jsonl') or flowkit.run(flow, df)",
    )


def _is_frame(data: Any) -> bool:
    return type(data).__name__ == "DataFrame" and hasattr(data, "to_json")
