"""Issue 3's fault run: 500 rows through an llm flow against a server that injects 429s, 500s
and timeouts. Every row ends scored, or failed with its reason after the retries, and the
retried rows score exactly as in a run without faults."""

from __future__ import annotations

import json
from pathlib import Path

import flowkit
from flowkit.llm import load_settings
from flowkit.testing.server import ServerConfig, serve

ROWS = 500


def _data(path: Path) -> Path:
    with open(path, "w") as f:
        for i in range(ROWS):
            f.write(
                json.dumps(
                    {
                        "context": f"Fact number {i} is true.",
                        "answer": f"Fact {i} holds.",
                        "question": f"q{i}",
                    }
                )
                + "\n"
            )
    return path


def _settings(tmp: Path, base_url: str, name: str) -> object:
    folder = tmp / name
    folder.mkdir()
    (folder / "flowkit.yaml").write_text(
        "default_model: flowkit-test\n"
        "connections:\n"
        # An 8 s timeout and 20 attempts: on a loaded machine an ordinary reply to 64 requests
        # at once can take seconds, and the learned stall deadline may cut it too; the injected
        # timeouts stall for far longer (timeout_delay).
        f"  local: {{base_url: '{base_url}', concurrency: 64, timeout: 8.0, max_retries: 20,"
        " backoff_base: 0.01, backoff_max: 0.05}\n"
    )
    return load_settings(folder, env={})


def _scores(run_dir: Path) -> dict[int, object]:
    rows = [json.loads(x) for x in (run_dir / "outputs.jsonl").read_text().splitlines()]
    return {r["line"]: (r["outputs"] or {}).get("score") for r in rows}


def test_faulty_endpoint_loses_no_rows_and_changes_no_scores(tmp_path: Path) -> None:
    data = _data(tmp_path / "rows.jsonl")
    faults = ServerConfig(
        rate_429=0.15,
        rate_500=0.05,
        rate_timeout=0.02,
        retry_after=0.0,
        timeout_delay=30.0,
        seed=11,
    )
    with serve(faults) as srv:
        faulty = flowkit.run(
            "groundedness",
            data,
            settings=_settings(tmp_path, srv.base_url, "a"),
            concurrency=64,
            use_cache=False,
            output=tmp_path / "faulty",
        )
        stats = srv.stats()
    with serve(ServerConfig()) as clean_srv:
        clean = flowkit.run(
            "groundedness",
            data,
            settings=_settings(tmp_path, clean_srv.base_url, "b"),
            concurrency=64,
            use_cache=False,
            output=tmp_path / "clean",
        )

    injected = sum(stats["faults"].get(k, 0) for k in ("429", "500", "timeout"))
    assert injected > 0.15 * ROWS  # the faults really happened
    assert faulty.counts["rows"] == ROWS
    assert faulty.counts["succeeded"] + faulty.counts["failed"] == ROWS
    rows = [json.loads(x) for x in (faulty.run_dir / "outputs.jsonl").read_text().splitlines()]
    for row in rows:
        if row["status"] == "failed":
            assert row["error"]["node"] == "judge" and row["error"]["message"]
    faulty_scores, clean_scores = _scores(faulty.run_dir), _scores(clean.run_dir)
    for line, score in faulty_scores.items():
        if score is not None:
            assert score == clean_scores[line]
    assert faulty.counts["succeeded"] == ROWS  # twenty attempts outlast these fault rates
    assert faulty.metrics == clean.metrics
