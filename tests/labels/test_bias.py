"""The bias probes: the judge's length bias at equal human label (checked against statsmodels'
OLS) and the position-swap probe for a pairwise judge (flowkit ships none, so one is written
here and run both ways round)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.labels.bias import length_bias
from flowkit.testing.server import LocalServer
from tests.labels.test_agree import CONTEXT, FILLER
from tests.support import read_jsonl, run_builtin, write, write_jsonl


def _biased(seed: int, per_100: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, 300).astype(float)
    tokens = rng.integers(10, 400, 300)
    judge = human + per_100 * tokens / 100 + rng.normal(0, 0.5, 300)
    return judge, human, tokens


def test_length_bias_equals_statsmodels_ols_with_one_intercept_per_label() -> None:
    linear_model = pytest.importorskip("statsmodels.regression.linear_model")
    judge, human, tokens = _biased(0, 0.3)
    levels = np.unique(human)
    x = np.column_stack([tokens / 100, (human[:, None] == levels[None, :]).astype(float)])
    fit = linear_model.OLS(judge, x).fit()
    probe = length_bias(judge.tolist(), human.tolist(), tokens.tolist())
    assert probe is not None
    assert probe.per_100_tokens == pytest.approx(fit.params[0], abs=1e-9)
    half = (probe.ci[1] - probe.ci[0]) / 2
    assert half == pytest.approx(1.959963984540054 * fit.bse[0], abs=1e-9)
    assert probe.flagged


def test_a_judge_without_length_bias_is_not_flagged() -> None:
    judge, human, tokens = _biased(1, 0.0)
    probe = length_bias(judge.tolist(), human.tolist(), tokens.tolist())
    assert probe is not None and probe.ci[0] < 0 < probe.ci[1] and not probe.flagged


def test_the_offline_judge_rewards_longer_answers_and_agree_flags_it(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    """The offline judge scores the share of the answer's words found in the context: with the
    same three hedging words in every answer, a longer answer scores higher. People who give
    every answer the same score expose that as length bias."""
    words = CONTEXT.split()
    rows = [
        {"context": CONTEXT, "answer": " ".join([*words[: 1 + i % 20], *FILLER[:3]])}
        for i in range(40)
    ]
    run_dir = run_builtin("groundedness", write_jsonl(tmp_path / "d.jsonl", rows), tmp_path).run_dir
    outputs = read_jsonl(run_dir / "outputs.jsonl")
    labels = write_jsonl(tmp_path / "l.jsonl", [{"line": r["line"], "score": 3} for r in outputs])
    out = CliRunner().invoke(main, ["agree", str(run_dir), "--labels", str(labels), "--json"])
    probe = json.loads(out.stdout)["outputs"]["score"]["length_bias"]
    assert probe["flagged"] and probe["per_100_tokens"] > 0 and probe["ci"][0] > 0
    text = CliRunner().invoke(main, ["agree", str(run_dir), "--labels", str(labels)]).stdout
    assert "judge score per 100 tokens at equal label" in text and "BIASED" in text


PAIRWISE = """
name: pairwise
inputs: {question: {type: string}, answer_a: {type: string}, answer_b: {type: string}}
outputs: {winner: ${judge.output}}
nodes:
  - {name: judge, type: python, source: pick.py, function: pick,
     inputs: {a: ${inputs.answer_a}, b: ${inputs.answer_b}}}
"""
# A judge with a position bias: the first answer wins unless the second is clearly longer.
BIASED = "def pick(a, b):\n    return 'B' if len(b) > len(a) + 20 else 'A'\n"
FAIR = (
    "def pick(a, b):\n    return 'tie' if len(a) == len(b) else ('A' if len(a) > len(b) else 'B')\n"
)


def _pairwise_runs(tmp_path: Path, judge: str, tag: str) -> tuple[Path, Path]:
    flow = write(tmp_path / tag / "pairwise.yaml", PAIRWISE)
    write(flow.parent / "pick.py", judge)
    rows = [
        {
            "question": f"q{i}",
            "answer_a": "x" * (10 + 7 * i % 50),
            "answer_b": "y" * (12 + 5 * i % 40),
        }
        for i in range(30)
    ]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    runs = []
    for name, a, b in (("ab", "answer_a", "answer_b"), ("ba", "answer_b", "answer_a")):
        mapping = {
            "question": "${data.question}",
            "answer_a": f"${{data.{a}}}",
            "answer_b": f"${{data.{b}}}",
        }
        runs.append(
            flowkit.run(
                flow,
                data,
                mapping=mapping,
                runs_root=tmp_path / "runs",
                name=f"{tag}-{name}",
                cache_dir=tmp_path / "cache",
            ).run_dir
        )
    return runs[0], runs[1]


def test_the_position_swap_probe_flags_a_first_position_judge(tmp_path: Path) -> None:
    ab, ba = _pairwise_runs(tmp_path, BIASED, "biased")
    out = CliRunner().invoke(main, ["agree", str(ab), "--swapped", str(ba), "--json"])
    assert out.exit_code == 0, out.output
    probe = json.loads(out.stdout)["position_swap"]
    first = [r["outputs"]["winner"] for r in read_jsonl(ab / "outputs.jsonl")]
    second = [r["outputs"]["winner"] for r in read_jsonl(ba / "outputs.jsonl")]
    follows = sum(1 for x, y in zip(first, second, strict=True) if {x, y} == {"A", "B"})
    assert probe["verdict"] == "winner" and probe["n"] == 30
    assert probe["consistent"] == pytest.approx(follows / 30)
    assert probe["first_wins"] == pytest.approx((first + second).count("A") / 60)
    assert probe["flagged"] and probe["first_wins_ci"][0] > 0.5


def test_a_fair_pairwise_judge_is_not_flagged(tmp_path: Path) -> None:
    ab, ba = _pairwise_runs(tmp_path, FAIR, "fair")
    out = CliRunner().invoke(main, ["agree", str(ab), "--swapped", str(ba), "--json"])
    probe = json.loads(out.stdout)["position_swap"]
    assert probe["consistent"] == 1.0 and not probe["flagged"]


def test_a_verdict_output_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    ab, ba = _pairwise_runs(tmp_path, FAIR, "fair")
    out = CliRunner().invoke(main, ["agree", str(ab), "--swapped", str(ba), "--verdict", "winer"])
    assert out.exit_code == 2
    assert out.stderr == (
        "error: --verdict 'winer': run 'fair-ab' has no such output (did you mean 'winner'?)\n"
        "  hint: its outputs: winner\n"
    )
