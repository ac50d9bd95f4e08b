"""The missing-column error of a very wide data file stays short: at most twenty columns are
listed, then how many more, and the did-you-mean still finds the near one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO

COLUMNS = 5_000


def test_the_missing_column_error_lists_twenty_columns_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    row = {f"col{i:05d}": i for i in range(COLUMNS)}
    row["anser"] = "Paris"
    (tmp_path / "wide.jsonl").write_text(json.dumps(row) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "flowkit.cli", "run", "exact_match", "--data", "wide.jsonl"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    shown = ", ".join(["anser", *(f"col{i:05d}" for i in range(19))])
    flow = REPO / "flows" / "exact_match.yaml"
    assert done.stderr.splitlines()[1] == (
        f"  {flow}:4: input 'answer' is required but maps to no data column (${{data.answer}}); "
        f"the data has: {shown}, … and {COLUMNS + 1 - 20} more (did you mean 'anser'?); map one "
        "with --map answer=${data.COLUMN}"
    )
    assert len(done.stderr) < 2_000
