"""A DataFrame column of bytes: UTF-8 bytes are their text; any other bytes are refused with the
column and row named (never their repr written as the value, never a pandas traceback)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flowkit
from tests.support import read_jsonl, write


def _flow(folder: Path) -> Path:
    write(folder / "m.py", "def f(x):\n    return x\n")
    return write(
        folder / "t.yaml",
        "name: t\ninputs: {x: {type: string}}\noutputs: {y: ${n.output}}\nnodes:\n"
        "  - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}\n",
    )


def test_bytes_that_are_not_utf8_are_refused_by_column_and_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flow = _flow(tmp_path)
    frame = pd.DataFrame({"x": [b"caf\xc3\xa9", b"ok", b"\xff\xfe latin"]})
    with pytest.raises(flowkit.DataError) as caught:
        flowkit.run(flow, frame, name="b")
    assert caught.value.message == (
        "column 'x', row 2: bytes that are not UTF-8 text (invalid start byte at byte 0)"
    )
    assert caught.value.hint == (
        "decode the column to text first, e.g. df['x'] = df['x'].str.decode('latin-1')"
    )
    assert not (tmp_path / "runs" / "b").exists()


@pytest.mark.parametrize(
    "column",
    [[b"caf\xc3\xa9", b"ok"], np.array([b"caf\xc3\xa9", b"ok"], dtype="S")],
    ids=["bytes", "numpy-bytes"],
)
def test_utf8_bytes_are_their_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: object
) -> None:
    monkeypatch.chdir(tmp_path)
    flow = _flow(tmp_path)
    result = flowkit.run(flow, pd.DataFrame({"x": column}), name="b", use_cache=False)
    assert [r["outputs"]["y"] for r in read_jsonl(result.run_dir / "outputs.jsonl")] == [
        "café",
        "ok",
    ]
