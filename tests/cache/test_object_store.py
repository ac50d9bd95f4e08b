"""The cache in an object store (flowkit.cache.objects), shared by drivers on several machines:
`--cache-dir s3://bucket/prefix`, tested against moto's S3 server (tests/cache/conftest.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import flowkit
from flowkit.cache.objects import ObjectCache
from flowkit.cache.result_cache import MISS
from flowkit.testing.server import LocalServer
from tests.cache.conftest import s3_fs
from tests.runs.test_backends import JUDGE  # a flow of one model call a row
from tests.support import read_json, read_jsonl, start_flowkit, write, write_jsonl


def _objects(url: str) -> dict[str, bytes]:
    fs = s3_fs(dict(os.environ))
    bucket_prefix = url.removeprefix("s3://")
    return {path: fs.cat_file(path) for path in fs.find(bucket_prefix)}


def test_entries_are_json_objects_named_by_their_key(s3_url: str) -> None:
    key = "ab" + "0" * 62
    cache = ObjectCache(s3_url)
    cache.put(key, {"score": 4}, {"model": "m", "messages": []})
    cache.close()
    objects = _objects(s3_url)
    name = f"{s3_url.removeprefix('s3://')}/ab/{key}.json"
    assert list(objects) == [name]
    assert json.loads(objects[name]) == {"o": {"score": 4}, "m": {"model": "m", "messages": []}}
    again = ObjectCache(s3_url)
    again.prefetch({key, "cd" + "1" * 62})
    assert again.get(key) == ({"score": 4}, {"model": "m", "messages": []})
    assert again.get("cd" + "1" * 62) is MISS


def _outputs(run_dir: Path) -> list[Any]:
    return [row["outputs"] for row in read_jsonl(run_dir / "outputs.jsonl")]


@pytest.mark.slow  # a second process: its start-up alone takes seconds
def test_a_second_driver_sharing_only_the_bucket_makes_no_model_calls(
    s3_url: str, s3_env: dict[str, str], llm_server: LocalServer, workdir: Path, tmp_path: Path
) -> None:
    write(workdir / "judge.yaml", JUDGE)
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(10)])
    first = flowkit.run("judge.yaml", data, cache_dir=s3_url, output="first")
    assert llm_server.stats()["chat_completions"] == 10
    llm_server.reset()
    # Another machine: a fresh process in a folder of its own, whose local cache folder and
    # home are empty; it has the flow, the data and the bucket, nothing else of the first's.
    there = tmp_path / "elsewhere"
    write(there / "judge.yaml", JUDGE)
    write_jsonl(there / "q.jsonl", [{"q": f"question {i}"} for i in range(10)])
    env = {
        **s3_env,
        "HOME": str(there / "home"),
        "FLOWKIT_CACHE_DIR": str(there / "empty-local-cache"),
        "XDG_CACHE_HOME": str(there / "xdg"),
    }
    args = ("run", "judge.yaml", "--data", "q.jsonl", "--cache-dir", s3_url, "-q")
    proc = start_flowkit(
        there, *args, "--output", "second", "--backend", "threading", "--workers", "2", env=env
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    assert llm_server.stats()["chat_completions"] == 0
    assert _outputs(there / "second") == _outputs(first.run_dir)
    assert read_json(there / "second" / "run.json")["counts"]["cache_hits"] == 10
    assert not (there / "empty-local-cache" / "cache.sqlite").exists()


def test_a_damaged_object_is_a_miss_with_a_notice_and_is_replaced(
    s3_url: str, llm_server: LocalServer, workdir: Path
) -> None:
    write(workdir / "judge.yaml", JUDGE)
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(3)])
    first = flowkit.run("judge.yaml", data, cache_dir=s3_url, output="first")
    damaged = sorted(_objects(s3_url))[0]
    fs = s3_fs(dict(os.environ))
    fs.pipe_file(damaged, b'{"o": "cut sho')
    llm_server.reset()
    again = flowkit.run("judge.yaml", data, cache_dir=s3_url, output="again")
    assert again.status == "completed"
    assert llm_server.stats()["chat_completions"] == 1
    assert _outputs(again.run_dir) == _outputs(first.run_dir)
    notices = read_json(again.run_dir / "run.json")["notices"]
    assert (
        f"1 damaged object(s) in the cache {s3_url} (the first: s3://{damaged}) counted as "
        "misses; this run's results replace them"
    ) in notices
    replaced = json.loads(fs.cat_file(damaged))["o"]
    assert replaced in [o["said"] for o in _outputs(first.run_dir)]


def test_an_object_of_another_shape_is_a_damaged_one(
    s3_url: str, llm_server: LocalServer, workdir: Path
) -> None:
    """Valid JSON that is not an entry (written by anything with access to the bucket) is a
    miss, as a cut one is: never a crash of the run reading it."""
    write(workdir / "judge.yaml", JUDGE)
    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(4)])
    first = flowkit.run("judge.yaml", data, cache_dir=s3_url, output="first")
    fs = s3_fs(dict(os.environ))
    bodies = [b'{"o": "x", "m": 5}', b"[1, 2]", b'"text"', b'{"m": {}}']
    for name, body in zip(sorted(_objects(s3_url)), bodies, strict=True):
        fs.pipe_file(name, body)
    llm_server.reset()
    again = flowkit.run("judge.yaml", data, cache_dir=s3_url, output="again")
    assert again.status == "completed"
    assert llm_server.stats()["chat_completions"] == 4
    assert _outputs(again.run_dir) == _outputs(first.run_dir)
    notices = read_json(again.run_dir / "run.json")["notices"]
    assert any(n.startswith("4 damaged object(s) in the cache") for n in notices)


def test_an_unreachable_store_is_a_notice_and_the_run_goes_on(
    llm_server: LocalServer, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the discard port: refused
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    write(workdir / "judge.yaml", JUDGE)
    data = write_jsonl(workdir / "q.jsonl", [{"q": "question"}])
    result = flowkit.run("judge.yaml", data, cache_dir="s3://nowhere/cache", output="run")
    assert result.status == "completed"
    (notice,) = [n for n in read_json(result.run_dir / "run.json")["notices"] if "cache" in n]
    assert notice.startswith("the cache s3://nowhere/cache failed: ")
    assert notice.endswith("; this run went on without it")


def test_concurrent_writers_need_no_lock(s3_url: str) -> None:
    """Two drivers flushing at once, some keys in common: every entry is whole afterwards, and
    a key both wrote holds one of the two values (each a valid result)."""
    import threading

    writers = [ObjectCache(s3_url), ObjectCache(s3_url)]
    keys = [f"{i:02x}" + "e" * 62 for i in range(40)]
    for n, cache in enumerate(writers):
        for key in keys[n * 10 : n * 10 + 30]:  # keys 10..29 are written by both
            cache.put(key, {"by": n, "key": key})
    threads = [threading.Thread(target=cache.close) for cache in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reader = ObjectCache(s3_url)
    reader.prefetch(set(keys))
    got = {key: reader.get(key) for key in keys}
    assert [k for k, hit in got.items() if hit is MISS] == keys[40:]
    for i, key in enumerate(keys):
        output, _ = got[key]
        assert output["key"] == key
        assert output["by"] in ({0} if i < 10 else {1} if i >= 30 else {0, 1})
    assert reader.problem is None and not reader.notices


def test_workers_ask_the_bucket_through_the_driver_for_keys_known_only_after_a_node_ran(
    s3_url: str, llm_server: LocalServer, workdir: Path
) -> None:
    """A chain of three model calls whose first prompt was edited, its output unchanged: the
    workers find the second and third nodes in the bucket (through the driver), as a local
    run does, and pay for the first alone."""
    from tests.runs.test_driver_lookup import _chain, _outputs, _paid

    data = write_jsonl(workdir / "q.jsonl", [{"q": f"question {i}"} for i in range(6)])
    first = flowkit.run(_chain(workdir, "Tell me"), data, cache_dir=s3_url, output="first")
    llm_server.reset()
    options: dict[str, Any] = {"backend": "threading", "workers": 2, "chunk_size": 2}
    edited = _chain(workdir, "Tell me please")
    changed = flowkit.run(edited, data, cache_dir=s3_url, output="changed", **options)
    paid = _paid(changed)
    assert {t["node"] for t in paid} == {"a"}
    assert llm_server.stats()["chat_completions"] == len(paid) == 6
    assert changed.counts["cache_hits"] == 12
    assert _outputs(changed) == _outputs(first)
