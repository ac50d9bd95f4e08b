"""`flowkit trace` and the trace sections of `flowkit show`, over runs made by really running
a small flow: an llm node (the local test server) feeding a sub-flow whose python node fails on
one row, plus a row with bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.flow.compose import compose
from flowkit.inspect.trace_view import Condition, parse_where, row_records, summarize
from flowkit.testing.server import LocalServer
from tests.support import write, write_jsonl

NODES = """
def score(text, x):
    if x == 3:
        raise ValueError("three is bad")
    return {"score": x % 5, "len": len(text)}


def mean(values):
    return {"mean": sum(values) / len(values)}
"""
INNER = """
name: inner
inputs: {text: {type: string}, x: {type: integer}}
outputs: {score: ${s.output.score}}
nodes:
  - {name: s, type: python, source: nodes.py, function: score,
     inputs: {text: ${inputs.text}, x: ${inputs.x}}}
  - {name: avg, type: aggregate, source: nodes.py, function: mean,
     inputs: {values: ${s.output.score}}}
"""
OUTER = """
name: outer
inputs: {text: {type: string}, x: {type: integer}}
outputs: {reply: ${judge.output}, score: ${kid.output.score}}
nodes:
  - name: judge
    type: llm
    messages:
      - {role: system, content: "Judge the text."}
      - {role: user, content: "{{ text }} [[reply: 4]]"}
    inputs: {text: ${inputs.text}}
  - {name: kid, type: flow, flow: inner.yaml, inputs: {text: ${judge.output}, x: ${inputs.x}}}
"""
LONG = "word " * 100  # 500 characters, folded in the tree


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def traced(llm_server: LocalServer, tmp_path: Path, cache_dir: Path) -> Path:
    """A run of 6 rows: row 1 has a long text, row 3 fails in kid.s, row 5 has no x."""
    write(tmp_path / "nodes.py", NODES)
    write(tmp_path / "inner.yaml", INNER)
    flow = write(tmp_path / "outer.yaml", OUTER)
    rows: list[dict[str, object]] = [
        {"text": LONG if i == 1 else f"t{i}", "x": i} for i in range(5)
    ]
    rows.append({"text": "no x"})
    # Named from the working directory (llm_server's workdir): the error that names the file
    # keeps its length whatever the temporary folder's, so the tables below never wrap.
    write_jsonl(Path.cwd() / "d.jsonl", rows)
    data = Path("d.jsonl")
    result = flowkit.run(flow, data, cache_dir=cache_dir, runs_root=tmp_path / "runs", name="a")
    return result.run_dir


def test_a_row_renders_as_a_tree_in_execution_order(traced: Path) -> None:
    out = cli("trace", traced, "--row", "1", "--max-chars", "40")
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert text.startswith("row 1  ok")
    lines = text.splitlines()
    judge = next(i for i, s in enumerate(lines) if "judge  llm  ok" in s)
    kid = next(i for i, s in enumerate(lines) if "kid  flow  ok" in s)
    child = next(i for i, s in enumerate(lines) if "kid.s  python  ok" in s)
    assert judge < kid < child  # by start time; the sub-flow's node after the sub-flow opens
    indent = lines[child].index("kid.s") - lines[kid].index("kid")
    assert indent > 0  # kid.s nests under kid
    # The llm node: its rendered prompt, the tokens, the reply; long text folded with a marker.
    assert "system: Judge the text." in text
    assert f"text: {LONG[:40]}…(460 more chars)" in text
    assert "user: " + LONG[:40] + "…(" in text
    assert "tokens: " in text and "finish stop" in text
    assert "response: 4" in text
    assert 'output: {"score": 1}' in text  # the sub-flow's output


def test_a_failed_row_shows_its_error_and_a_traceback_with_verbose(traced: Path) -> None:
    out = cli("trace", traced, "--row", "3")
    assert out.exit_code == 0, out.output
    assert "row 3  failed" in out.stdout
    assert "node kid.s: ValueError: three is bad" in out.stdout
    assert "kid.s  python  failed" in out.stdout
    assert "Traceback" not in out.stdout
    verbose = cli("trace", traced, "--row", "3", "--verbose")
    assert "Traceback (most recent call last)" in verbose.stdout
    assert 'raise ValueError("three is bad")' in verbose.stdout
    # A bad-input row has no traces, only its data error.
    bad = cli("trace", traced, "--row", "5")
    assert bad.exit_code == 0 and "row 5  bad_input" in bad.stdout
    assert "DataError" in bad.stdout


def test_node_filter_and_json(traced: Path) -> None:
    only = cli("trace", traced, "--row", "0", "--node", "kid")
    assert only.exit_code == 0, only.output
    assert "kid.s  python" in only.stdout and "judge" not in only.stdout
    records = json.loads(cli("trace", traced, "--row", "0", "--json").stdout)
    assert {r["node"] for r in records} == {"judge", "kid", "kid.s"}
    assert all(r["line"] == 0 for r in records)
    assert [r["start"] for r in records] == sorted(r["start"] for r in records)
    (judge,) = json.loads(cli("trace", traced, "--row", "0", "--node", "judge", "--json").stdout)
    assert judge["llm"]["messages"][0] == {"role": "system", "content": "Judge the text."}
    assert judge["llm"]["usage"]["total_tokens"] > 0
    # Aggregates are row -1.
    aggs = json.loads(cli("trace", traced, "--row", "-1", "--json").stdout)
    assert [r["node"] for r in aggs] == ["kid.avg"]


def test_usage_errors(traced: Path) -> None:
    typo = cli("trace", traced, "--row", "0", "--node", "jugde")
    assert typo.exit_code == 2 and "did you mean 'judge'" in typo.stderr
    assert cli("trace", traced, "--row", "99").exit_code == 2
    assert cli("trace", traced).exit_code == 2
    assert cli("trace", traced, "--row", "0", "--failed").exit_code == 2
    assert cli("trace", traced, "--failed", "--node", "kid").exit_code == 2
    bad = cli("trace", traced, "--where", "score")
    assert bad.exit_code == 2 and "PATH<OP>VALUE" in bad.stderr


def test_failed_rows_listed(traced: Path) -> None:
    out = cli("trace", traced, "--failed")
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.stdout.splitlines()[1:-1]]
    assert [r[:3] for r in rows] == [["3", "failed", "kid.s"], ["5", "bad_input", "DataError:"]]
    assert "ValueError: three is bad" in out.stdout
    assert out.stdout.rstrip().endswith("2 rows matched")
    as_json = [
        json.loads(s) for s in cli("trace", traced, "--failed", "--json").stdout.split("\n")[:-1]
    ]
    assert [r["line"] for r in as_json] == [3, 5]


def test_where_filters_rows_by_their_outputs(traced: Path) -> None:
    def lines(*args: str) -> list[int]:
        out = cli("trace", traced, *args, "--json")
        assert out.exit_code == 0, out.output
        return [json.loads(s)["line"] for s in out.stdout.splitlines()]

    assert lines("--where", "score>=2") == [2, 4]
    assert lines("--where", "score<2") == [0, 1]  # row 3's score is null: no match
    assert lines("--where", "score!=1", "--where", "reply=='4'") == [0, 2, 4]
    assert lines("--where", "score==null") == [3]
    assert lines("--failed", "--where", "reply==4") == []  # "4" is text, not the number 4
    table = cli("trace", traced, "--where", "score>=2", "--limit", "1")
    assert "2 rows matched (showing 1; --limit 0 for all)" in table.stdout


def test_where_paths_into_a_suites_nested_outputs(tmp_path: Path, cache_dir: Path) -> None:
    write(tmp_path / "nodes.py", "def half(x):\n    return x / 2\n")
    for name in ("alpha", "beta"):
        write(
            tmp_path / f"{name}.yaml",
            f"""
            name: {name}
            inputs: {{x: {{type: number}}}}
            outputs: {{score: ${{h.output}}}}
            nodes:
              - {{name: h, type: python, source: nodes.py, function: half,
                 inputs: {{x: ${{inputs.x}}}}}}
            """,
        )
    suite = compose([tmp_path / "alpha.yaml", tmp_path / "beta.yaml"])
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(6)])
    run = flowkit.run(suite, data, cache_dir=cache_dir, runs_root=tmp_path / "runs").run_dir
    out = cli("trace", run, "--where", "beta.score<1.5")
    assert out.exit_code == 0, out.output
    assert [s.split()[0] for s in out.stdout.splitlines()[1:-1]] == ["0", "1", "2"]
    assert "beta.score" in out.stdout.splitlines()[0]
    assert len(row_records(run, 4)) == 4  # alpha, alpha.h, beta, beta.h


def test_parse_where_values() -> None:
    assert parse_where("a.b<3") == Condition("a.b", "<", 3)
    assert parse_where(" result == 'pass' ") == Condition("result", "==", "pass")
    assert parse_where("x>=0.5").value == 0.5
    assert parse_where("ok==true").value is True
    assert parse_where("label!=fail").value == "fail"
    assert not Condition("s", "<", 3).holds({"s": "2"})  # text never compares with a number
    assert not Condition("s", "<", 3).holds({"s": True})
    assert Condition("a.0", "==", 1).holds({"a": [1, 2]})
    with pytest.raises(UsageError):
        parse_where("score=>3")


def test_show_has_scores_slowest_nodes_and_errors(traced: Path) -> None:
    out = cli("show", traced)
    assert out.exit_code == 0, out.output
    text = out.stdout
    for section in ("scores", "metrics", "tokens by node", "slowest nodes", "errors"):
        assert f"\n{section}" in text, section
    scores = text.split("\nscores")[1].splitlines()
    assert scores[2].split() == ["kid", "1.75", "—", "—", "—", "1"]  # kid failed in one row
    slow = text.split("\nslowest nodes")[1].split("\nerrors")[0]
    assert "judge" in slow and "kid.s" in slow and "kid  " not in slow  # sub-flow left out
    errors = text.split("\nerrors")[1].splitlines()[2:]
    assert errors[0].split()[:4] == ["(data)", "DataError", "1", "5"]
    assert errors[1].split() == ["kid.s", "ValueError", "1", "3", "three", "is", "bad"]


def test_show_leaves_cache_hits_out_of_the_slowest_nodes(
    traced: Path, tmp_path: Path, cache_dir: Path
) -> None:
    again = flowkit.run(
        tmp_path / "outer.yaml",
        "d.jsonl",  # from the working directory, where the fixture wrote it
        cache_dir=cache_dir,
        runs_root=tmp_path / "runs",
    )
    summary = summarize(again.run_dir)
    # Only the failure ran again (failures are never cached); every other node was a hit.
    assert [(t.node, t.runs) for t in summary.slowest] == [("kid.s", 1)]
    assert [(g.node, g.type, g.count) for g in summary.errors] == [
        ("(data)", "DataError", 1),
        ("kid.s", "ValueError", 1),
    ]
    tree = cli("trace", again.run_dir, "--row", "0").stdout
    assert re.search(r"judge  llm  ok  [\d.]+s  cache hit", tree)
    assert re.search(r"kid\.s  python  ok  [\d.]+s  cache hit", tree)
    show = cli("show", again.run_dir).stdout
    assert "judge" not in show.split("\nslowest nodes")[1].split("\nerrors")[0]
