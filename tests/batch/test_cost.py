"""Batched calls are priced at the batch price, and the run says what they would have cost
online."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.llm.usage import BATCH_SHARE
from flowkit.testing.server import LocalServer
from tests.batch.conftest import questions
from tests.support import write

MODEL = "gpt-4o-mini"  # in the built-in price table


def test_batched_calls_cost_the_batch_share_of_the_list_price(
    llm_server: LocalServer, chained: Path, tmp_path: Path
) -> None:
    data = questions(tmp_path, 6)
    online = flowkit.run(chained, data, model=MODEL, use_cache=False, runs_root=tmp_path / "r")
    batched = flowkit.run(
        chained, data, model=MODEL, use_cache=False, runs_root=tmp_path / "r", batch=True
    )
    paid, listed = online.info["cost"], batched.info["cost"]
    assert "online_usd" not in paid
    assert listed["online_usd"] == pytest.approx(paid["usd"])
    assert listed["usd"] == pytest.approx(paid["usd"] * BATCH_SHARE)
    for node, usd in listed["by_node"].items():
        assert usd == pytest.approx(paid["by_node"][node] * BATCH_SHARE)
    shown = CliRunner().invoke(main, ["show", str(batched.run_dir)])
    assert f"in batches; the same calls online ≈ ${listed['online_usd']:.4f}" in shown.stdout
    assert (
        "the same calls online"
        not in CliRunner().invoke(main, ["show", str(online.run_dir)]).stdout
    )


def test_a_connection_with_batch_true_uses_the_batch_price_table(
    llm_server: LocalServer, chained: Path, workdir: Path
) -> None:
    write(
        workdir / "flowkit.yaml",
        f"""
        default_model: {MODEL}
        connections:
          local: {{base_url: "{llm_server.base_url}", batch: true}}
        batch_prices:
          {MODEL}: {{input: 0.1, output: 0.2}}
        """,
    )
    result = flowkit.run(chained, questions(workdir, 4), use_cache=False)
    assert llm_server.stats()["batches_created"] == 2
    assert llm_server.stats()["chat_completions"] == 0
    tokens = result.info["tokens_by_node"]
    for node, usage in tokens.items():
        assert usage["batch_prompt_tokens"] == usage["prompt_tokens"] > 0
        expected = (usage["prompt_tokens"] * 0.1 + usage["completion_tokens"] * 0.2) / 1e6
        assert result.info["cost"]["by_node"][node] == pytest.approx(expected)
