"""Hostile values, met as a user meets them (the CLI in its own process): one bad value fails
one row, never the run, and distinct values never share a cache key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from flowkit.cache.canonical import canonical_bytes, to_json_value
from flowkit.data.read import iter_rows
from tests.support import read_json, read_jsonl, start_flowkit, write

FLOW = """
    name: t
    inputs: {x: {type: any}}
    outputs: {y: ${n.output}}
    nodes:
      - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}
      - {name: agg, type: aggregate, source: m.py, function: agg, inputs: {ys: ${n.output}}}
    """
NODES = """
import math


def f(x):
    if x == "big":
        return 10**5000
    if x == "self":
        a = []
        a.append(a)
        return a
    if x == "deep":
        v = []
        for _ in range(2000):
            v = [v]
        return v
    if x == "sur":
        return "\\ud800"
    if isinstance(x, float) and math.isnan(x):
        return 1
    if isinstance(x, float) and math.isinf(x):
        return 3 if x > 0 else 4
    if x is None:
        return 5
    return 2


def agg(ys):
    return {"sum": sum(y for y in ys if isinstance(y, int))}
"""


def _run(work: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    flow = [] if "--resume" in args else ["t.yaml", "--data", "d.jsonl", "--cache-dir", "cache"]
    proc = start_flowkit(work, "run", *flow, *args, env=env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out + err


def _project(tmp_path: Path, data: bytes) -> Path:
    write(tmp_path / "t.yaml", FLOW)
    write(tmp_path / "m.py", NODES)
    (tmp_path / "d.jsonl").write_bytes(data)
    return tmp_path


def test_bad_values_in_the_data_cost_their_row_only(tmp_path: Path) -> None:
    long_row = b'{"x": "' + b"a" * 10_000 + b'"}\n'
    data = (
        b'{"x": "a"}\n{"x": "\\ud800"}\n{"x": 1'
        + b"1" * 5000
        + b"}\n"
        + long_row
        + b'{"x": "\\ud83d\\ude00"}\n'
    )
    work = _project(tmp_path, data)
    code, out = _run(
        work, "--name", "r", "--fail-on-error", "1", env={"FLOWKIT_MAX_ROW_BYTES": "8000"}
    )
    assert code == 0, out
    assert "Traceback" not in out
    rows = {r["line"]: r for r in read_jsonl(work / "runs" / "r" / "outputs.jsonl")}
    assert [rows[i]["status"] for i in range(5)] == [
        "ok",
        "bad_input",
        "bad_input",
        "bad_input",
        "ok",
    ]
    assert "d.jsonl:2: a string holds a lone surrogate (\\ud800)" in out
    assert "d.jsonl:3: an integer has more than 4,300 digits (Python's limit)" in out
    assert "d.jsonl:4: the row is longer than 8000 bytes; raise FLOWKIT_MAX_ROW_BYTES" in out
    assert read_json(work / "runs" / "r" / "run.json")["status"] == "completed"
    # --resume of that run finishes instead of crashing on the same rows.
    code, out = _run(work, "--resume", "runs/r", "--fail-on-error", "1")
    assert code == 0 and "Traceback" not in out, out
    # --strict refuses with the same sentence, not a traceback.
    code, out = _run(work, "--strict")
    assert code == 2, out
    assert "d.jsonl:2: a string holds a lone surrogate (\\ud800)" in out


def test_an_unstorable_output_fails_that_node_in_that_row(tmp_path: Path) -> None:
    rows = b"".join(b'{"x": "%s"}\n' % k for k in (b"big", b"self", b"deep", b"sur", b"ok"))
    work = _project(tmp_path, rows)
    code, out = _run(work, "--name", "r", "--fail-on-error", "1")
    assert code == 0, out
    outputs = {r["line"]: r for r in read_jsonl(work / "runs" / "r" / "outputs.jsonl")}
    messages = [outputs[i]["error"]["message"] for i in range(4)]
    assert messages == [
        "an integer has more than 4,300 digits, too long to store as JSON; return it as a string",
        "the value is nested too deeply to store (or a list or dict contains itself)",
        "the value is nested too deeply to store (or a list or dict contains itself)",
        "a string holds a lone surrogate (\\ud800), which is not valid Unicode text",
    ]
    assert [outputs[i]["error"]["node"] for i in range(4)] == ["n"] * 4
    assert outputs[4]["status"] == "ok"
    assert read_json(work / "runs" / "r" / "metrics.json")["t.sum"] == 2


def test_nan_infinities_and_null_have_keys_of_their_own(tmp_path: Path) -> None:
    data = b'{"x": null}\n{"x": NaN}\n{"x": Infinity}\n{"x": -Infinity}\n'
    work = _project(tmp_path, data)
    sums, hits = [], []
    for name in ("cold", "warm"):
        code, out = _run(work, "--name", name)
        assert code == 0, out
        run = read_json(work / "runs" / name / "run.json")
        sums.append(read_json(work / "runs" / name / "metrics.json")["t.sum"])
        hits.append(run["counts"]["cache_hits"])
    assert sums == [5 + 1 + 3 + 4] * 2
    assert hits[1] >= 4


def test_non_finite_numbers_are_stored_as_named_strings() -> None:
    keys = {canonical_bytes(v) for v in (None, math.nan, math.inf, -math.inf, "NaN")}
    assert len(keys) == 5
    assert to_json_value({"a": [math.nan, math.inf, -math.inf, None]}) == {
        "a": ["NaN", "Infinity", "-Infinity", None]
    }


def test_numpy_values_beside_a_null_are_stored_as_plain_json() -> None:
    np = pytest.importorskip("numpy")
    value = {"emb": np.array([0.5, 1.5]), "note": None, "n": np.int64(3), "x": math.nan}
    assert to_json_value(value) == {"emb": [0.5, 1.5], "note": None, "n": 3, "x": "NaN"}
    assert canonical_bytes(value) == canonical_bytes(
        {"emb": [0.5, 1.5], "note": None, "n": 3, "x": math.nan}
    )


def test_a_line_past_the_cap_is_never_read_whole(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_bytes(b"x\n" + b"y" * 100_000 + b"\n1\n")
    rows = list(iter_rows(data, max_bytes=1000))
    assert [r.values for r in rows] == [None, {"x": "1"}]
    assert rows[0].error == (
        "d.csv:2: the row is longer than 1000 bytes; raise FLOWKIT_MAX_ROW_BYTES if it is real data"
    )
