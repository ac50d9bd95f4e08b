"""The node cache: what enters a key, what a rerun costs, and the SQLite store itself."""

from __future__ import annotations

import random
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.api import RunResult
from flowkit.cache.store import MISS, SCHEMA, Cache, default_cache_dir, node_key
from flowkit.testing.server import LocalServer
from tests.support import traces_by, write, write_jsonl

# ------------------------------------------------------------------------------ the store


def test_get_put_and_flush(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    assert cache.get("k") is MISS
    cache.put("k", {"score": 4}, {"model": "m", "messages": []})
    cache.put("plain", [1, 2])
    assert cache.get("k") == ({"score": 4}, {"model": "m", "messages": []})  # still pending
    assert cache.get("plain") == ([1, 2], None)
    assert cache.count() == 2
    cache.close()
    again = Cache(tmp_path / "c")
    assert again.get("k") == ({"score": 4}, {"model": "m", "messages": []})
    assert (again.hits, again.misses) == (1, 0)
    again.close()


def test_two_cache_objects_share_one_file(tmp_path: Path) -> None:
    one, two = Cache(tmp_path), Cache(tmp_path)
    assert one.path == two.path
    mode = sqlite3.connect(one.path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    one.put("a", 1)
    two.put("b", 2)
    one.flush()
    two.flush()
    assert one.get("b") == (2, None) and two.get("a") == (1, None)
    one.put("c", 3)
    two.put("c", 3)
    two.flush()
    one.flush()  # the same key from both: no conflict
    assert one.count() == two.count() == 3
    one.close()
    two.close()


def test_node_key_depends_on_inputs_not_their_order() -> None:
    assert node_key("s", {"a": 1, "b": [1, 2]}) == node_key("s", {"b": [1, 2], "a": 1})
    assert node_key("s", {"a": 1}) != node_key("s", {"a": 2})
    assert node_key("s", {"a": 1}) != node_key("t", {"a": 1})
    assert node_key("s", {"a": 1}) != node_key("s", {"a": 1.5})


def _statements(cache: Cache) -> list[str]:
    """The SQL statements ``cache`` sends from now on."""
    sent: list[str] = []
    cache._db.set_trace_callback(sent.append)
    return sent


def _filled(path: Path, count: int) -> list[str]:
    keys = [node_key("s", {"i": i}) for i in range(count)]
    cache = Cache(path)
    for i, key in enumerate(keys):
        cache.put(key, {"i": i})
    cache.close()
    return keys


def test_prefetch_answers_hits_and_misses_from_memory(tmp_path: Path) -> None:
    keys = _filled(tmp_path, 10)
    cache = Cache(tmp_path)
    cache.prefetch({keys[2], keys[5], "absent"})
    sent = _statements(cache)
    assert cache.get(keys[2]) == ({"i": 2}, None)
    assert cache.get(keys[5]) == ({"i": 5}, None)
    assert cache.get("absent") is MISS
    assert sent == [] and (cache.hits, cache.misses) == (2, 1)
    assert cache.get(keys[7]) == ({"i": 7}, None)  # not prefetched: looked up on its own
    assert len(sent) == 1
    cache.close()


def test_a_rerun_in_write_order_reads_ranges_not_keys(tmp_path: Path) -> None:
    keys = _filled(tmp_path, 3000)
    cache = Cache(tmp_path)
    sent = _statements(cache)
    for start in range(0, 3000, 300):
        cache.prefetch(set(keys[start : start + 300]))
        for i in range(start, start + 300):
            assert cache.get(keys[i]) == ({"i": i}, None)
    by_key = [s for s in sent if " IN (" in s]
    assert len(by_key) == 1, "only the first batch, before there is a place to read from"
    assert len(sent) == 10
    cache.close()


def test_prefetch_in_any_order_gives_what_get_alone_gives(tmp_path: Path) -> None:
    keys = _filled(tmp_path, 1200)
    rng = random.Random(1)
    asked = [*rng.sample(keys, 900), *(node_key("other", {"i": i}) for i in range(100))]
    rng.shuffle(asked)
    ahead, alone = Cache(tmp_path), Cache(tmp_path)
    for start in range(0, len(asked), 128):
        batch = asked[start : start + 128]
        ahead.prefetch(set(batch))
        assert [ahead.get(k) for k in batch] == [alone.get(k) for k in batch]
    assert (ahead.hits, ahead.misses) == (alone.hits, alone.misses) == (900, 100)
    ahead.close()
    alone.close()


def test_a_value_read_ahead_and_then_replaced_is_read_new(tmp_path: Path) -> None:
    keys = _filled(tmp_path, 5)
    cache = Cache(tmp_path)
    cache.prefetch({keys[1]})
    cache.put(keys[1], {"i": "new"})  # what --refresh does
    cache.flush()
    assert cache.get(keys[1]) == ({"i": "new"}, None)
    cache.close()


def test_a_key_missed_by_a_prefetch_is_found_once_written(tmp_path: Path) -> None:
    cache = Cache(tmp_path, flush_every=1)
    cache.prefetch({"k"})
    assert cache.get("k") is MISS
    cache.put("k", 1)  # flushed at once: no longer pending
    assert cache.get("k") == (1, None)
    cache.close()


def test_a_cache_written_by_schema_1_is_migrated(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "cache.sqlite")
    db.execute(
        "CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL, created REAL NOT NULL)"
        " WITHOUT ROWID"
    )
    db.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT)")
    db.execute("INSERT INTO meta VALUES ('schema', '1')")
    db.execute("INSERT INTO entries VALUES ('old', CAST('{\"o\":[1]}' AS BLOB), 1.0)")
    db.commit()
    db.close()
    cache = Cache(tmp_path)
    assert cache.get("old") == ([1], None)
    tables = {r[0] for r in cache._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "entries" not in tables
    assert cache._db.execute("SELECT v FROM meta WHERE k='schema'").fetchone() == (str(SCHEMA),)
    cache.close()
    assert Cache(tmp_path).get("old") == ([1], None)  # and opening it again changes nothing


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLOWKIT_CACHE_DIR", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("FLOWKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "flowkit"


# ------------------------------------------------------------------------------ python flows

NODES = '''
from pathlib import Path


def add(a, b):
    return a + b


def boom_on_3(x):
    if x == 3:
        raise ValueError("three")
    return x


def tick(x):
    """A different answer every call: the count of calls so far, kept in a file."""
    counter = Path(__file__).with_name("ticks.txt")
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n


def total(values):
    return {"sum": sum(values)}
'''

FLOW = """
    name: cached
    inputs: {x: {type: integer}}
    outputs: {y: ${second.output}, t: ${t.output}}
    nodes:
      - {name: first, type: python, source: nodes.py, function: add, inputs: {a: ${inputs.x}, b: 1}}
      - {name: second, type: python, source: more.py, function: double,
         inputs: {x: ${first.output}}}
      - {name: t, type: python, source: nodes.py, function: tick, inputs: {x: ${inputs.x}}}
      - {name: sum, type: aggregate, source: nodes.py, function: total,
         inputs: {values: ${second.output}}}
    """


@pytest.fixture
def project(tmp_path: Path) -> Path:
    work = tmp_path / "project"
    write(work / "nodes.py", NODES)
    write(work / "more.py", "def double(x):\n    return x * 2\n")
    write(work / "flow.yaml", FLOW)
    write_jsonl(work / "data.jsonl", [{"x": i} for i in range(4)])
    return work


def run(project: Path, flow: str = "flow.yaml", **kw: Any) -> RunResult:
    kw.setdefault("cache_dir", project.parent / "cache")
    return flowkit.run(
        project / flow, project / "data.jsonl", runs_root=project.parent / "runs", **kw
    )


def hits(result: RunResult) -> dict[str, set[bool]]:
    """Node → the cache_hit flags its records carry."""
    out: dict[str, set[bool]] = {}
    for t in result.traces():
        out.setdefault(t["node"], set()).add(t.get("cache_hit", False))
    return out


def test_a_rerun_runs_no_node(project: Path) -> None:
    first = run(project)
    assert first.counts["node_runs"] == 12 and first.counts["cache_hits"] == 0
    second = run(project)
    assert second.counts["node_runs"] == 0
    assert second.counts["cache_hits"] == 12
    assert hits(second) == {"first": {True}, "second": {True}, "t": {True}, "sum": {True}}
    assert list(second.rows()) == list(first.rows())
    assert second.metrics == first.metrics == {"cached.sum": 2 * (1 + 2 + 3 + 4)}


def test_editing_a_source_file_reruns_its_node_only(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bytecode caching on, as for most users: a .pyc is trusted when the source's mtime (whole
    # seconds) and size match, which an edit made right away with the same length does.
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    run(project)
    more = project / "more.py"
    more.write_text(more.read_text().replace("x * 2", "x * 3"))
    second = run(project)
    assert hits(second) == {"first": {True}, "second": {False}, "t": {True}, "sum": {False}}
    assert [r["outputs"]["y"] for r in second.rows()] == [3, 6, 9, 12]
    assert second.metrics == {"cached.sum": 30}


def test_the_node_name_and_flow_path_are_not_in_the_key(project: Path) -> None:
    first = run(project)
    moved = project.parent / "elsewhere"
    moved.mkdir()
    for name in ("nodes.py", "more.py", "data.jsonl"):
        shutil.copy(project / name, moved / name)
    renamed = FLOW.replace("first", "renamed").replace("name: sum", "name: totals")
    write(moved / "other.yaml", renamed)
    second = run(moved, "other.yaml", cache_dir=project.parent / "cache")
    assert second.counts["node_runs"] == 0
    assert hits(second) == {"renamed": {True}, "second": {True}, "t": {True}, "totals": {True}}
    assert [r["outputs"] for r in second.rows()] == [r["outputs"] for r in first.rows()]


def test_failures_are_not_cached(tmp_path: Path) -> None:
    write(tmp_path / "nodes.py", NODES)
    flow = write(
        tmp_path / "boom.yaml",
        """
        name: boom
        inputs: {x: {type: integer}}
        outputs: {y: ${b.output}}
        nodes:
          - {name: b, type: python, source: nodes.py, function: boom_on_3, inputs: {x: ${inputs.x}}}
        """,
    )
    data = write_jsonl(tmp_path / "d.jsonl", [{"x": i} for i in range(5)])
    kw: dict[str, Any] = {"cache_dir": tmp_path / "cache", "runs_root": tmp_path / "runs"}
    flowkit.run(flow, data, **kw)
    again = flowkit.run(flow, data, **kw)
    assert again.counts["node_failures"] == 1
    assert again.counts["cache_hits"] == 4
    t = traces_by(again.traces())
    assert t[(3, "b")]["status"] == "failed" and not t[(3, "b")].get("cache_hit", False)
    assert t[(2, "b")]["cache_hit"] is True


def test_no_cache_neither_reads_nor_writes(project: Path) -> None:
    cache = project.parent / "cache"
    run(project, use_cache=False)
    assert not cache.exists()
    run(project)
    result = run(project, use_cache=False)
    assert result.counts["node_runs"] == 12 and result.counts["cache_hits"] == 0
    assert result.info["options"]["cache"] is False
    assert hits(result) == {"first": {False}, "second": {False}, "t": {False}, "sum": {False}}


def test_refresh_recomputes_a_node_and_stores_the_new_result(project: Path) -> None:
    first = run(project)
    assert [r["outputs"]["t"] for r in first.rows()] == [1, 2, 3, 4]
    refreshed = run(project, refresh=["t"])
    assert hits(refreshed) == {"first": {True}, "second": {True}, "t": {False}, "sum": {True}}
    assert [r["outputs"]["t"] for r in refreshed.rows()] == [5, 6, 7, 8]
    assert refreshed.info["options"]["refresh"] == ["t"]
    # The refreshed results replaced the old ones: the next plain run replays them.
    after = run(project)
    assert after.counts["node_runs"] == 0
    assert [r["outputs"]["t"] for r in after.rows()] == [5, 6, 7, 8]


def test_refresh_applies_to_aggregate_nodes(project: Path) -> None:
    run(project)
    result = run(project, refresh=["sum"])
    assert hits(result)["sum"] == {False}
    assert hits(result)["second"] == {True}


def test_a_node_with_cache_false_always_recomputes(project: Path) -> None:
    write(project / "flow.yaml", FLOW.replace("function: tick,", "function: tick, cache: false,"))
    run(project)
    result = run(project)
    assert hits(result) == {"first": {True}, "second": {True}, "t": {False}, "sum": {True}}
    assert [r["outputs"]["t"] for r in result.rows()] == [5, 6, 7, 8]


# ------------------------------------------------------------------------------ llm flows

JUDGES = """
    name: judges
    inputs: {x: {type: string}}
    outputs: {a: ${post_a.output}, b: ${post_b.output}}
    nodes:
      - {name: judge_a, type: llm, prompt: a.jinja2, inputs: {x: ${inputs.x}}}
      - {name: judge_b, type: llm, prompt: b.jinja2, inputs: {x: ${inputs.x}}}
      - {name: post_a, type: python, source: post.py, function: shout,
         inputs: {text: ${judge_a.output}}}
      - {name: post_b, type: python, source: post.py, function: shout,
         inputs: {text: ${judge_b.output}}}
    """


def test_rerun_and_prompt_edit_cost_only_what_changed(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    work = tmp_path / "llm"
    write(work / "judges.yaml", JUDGES)
    write(work / "a.jinja2", "Judge A of {{ x }} [[reply: a1 {{ x }}]]\n")
    write(work / "b.jinja2", "Judge B of {{ x }} [[reply: b1 {{ x }}]]\n")
    write(work / "post.py", "def shout(text):\n    return text.upper()\n")
    data = write_jsonl(work / "d.jsonl", [{"x": w} for w in ("p", "q", "r")])
    kw: dict[str, Any] = {"cache_dir": tmp_path / "cache", "runs_root": tmp_path / "runs"}

    first = flowkit.run(work / "judges.yaml", data, **kw)
    assert llm_server.stats()["chat_completions"] == 6
    assert next(first.rows())["outputs"] == {"a": "A1 P", "b": "B1 P"}

    rerun = flowkit.run(work / "judges.yaml", data, **kw)
    assert llm_server.stats()["chat_completions"] == 6  # not one more call
    assert rerun.counts["node_runs"] == 0 and rerun.tokens["calls"] == 0
    assert all(t["cache_hit"] for t in rerun.traces())
    replayed = traces_by(rerun.traces())[(0, "judge_a")]
    assert replayed["llm"]["messages"] == [
        {"role": "user", "content": "Judge A of p [[reply: a1 p]]"}
    ]

    write(work / "a.jinja2", "Judge A of {{ x }} [[reply: a2 {{ x }}]]\n")
    edited = flowkit.run(work / "judges.yaml", data, **kw)
    assert llm_server.stats()["chat_completions"] == 9  # judge_a once per row, nothing else
    assert hits(edited) == {
        "judge_a": {False},
        "post_a": {False},
        "judge_b": {True},
        "post_b": {True},
    }
    assert [r["outputs"] for r in edited.rows()] == [
        {"a": "A2 P", "b": "B1 P"},
        {"a": "A2 Q", "b": "B1 Q"},
        {"a": "A2 R", "b": "B1 R"},
    ]
