"""Prompt Flow as the oracle: generated and hand-written DAG folders run through Prompt Flow
1.18 (its own virtualenv, built by `.ci/pf-oracle`) and through flowkit against offline judges
that record every request; any difference not documented in docs/prompt-flow-differences.md
fails. Marked `pforacle` (left out of the README's suite; `.ci/run` runs it as a stage)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from flowkit.testing.config import ServerConfig
from flowkit.testing.server import LocalServer, serve
from tests.pfcompat.oracle import (
    API_KEY,
    DIFFERENCES_USED,
    Case,
    canonical_requests,
    compare,
    documented,
    oracle_python,
    run_flowkit,
    run_prompt_flow,
)
from tests.pfcompat.strategies import Generated, pf_flows

pytestmark = [
    pytest.mark.pforacle,
    pytest.mark.timeout(900),  # a Prompt Flow interpreter per batch of folders, minutes in all
    pytest.mark.skipif(oracle_python() is None, reason="no oracle virtualenv (.ci/pf-oracle)"),
]
CORPUS = Path(__file__).with_name("corpus")
BATCH = int(os.environ.get("FLOWKIT_PF_ORACLE_BATCH", "50"))
BATCHES = int(os.environ.get("FLOWKIT_PF_ORACLE_BATCHES", "6"))
"""Generated flows per Prompt Flow interpreter start, and how many starts (300 flows in CI)."""


@pytest.fixture
def judges(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalServer, LocalServer]]:
    """Two offline judges, one per side, so that each records only its own side's requests."""
    config = ServerConfig(record_requests=True, api_key=API_KEY)
    with serve(config) as pf_judge, serve(config) as fk_judge:
        monkeypatch.setenv("OPENAI_BASE_URL", fk_judge.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
        monkeypatch.delenv("FLOWKIT_MODEL", raising=False)  # each node's own model, as in pf
        for var in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "OPENAI_API_VERSION"):
            monkeypatch.delenv(var, raising=False)
        yield pf_judge, fk_judge


def differences(cases: list[Case], judges: tuple[LocalServer, LocalServer], work: Path) -> list:
    """What differs between the two tools on ``cases``; also checks that the comparison had
    something to compare (most folders completed rows in Prompt Flow)."""
    pf_judge, fk_judge = judges
    pf_judge.reset()
    fk_judge.reset()
    pf_results = run_prompt_flow(cases, pf_judge.base_url, work)
    ran = [pf for pf in pf_results if any(r["status"] == "Completed" for r in pf.get("rows", []))]
    assert len(ran) * 4 >= len(cases) * 3, "most folders complete rows in Prompt Flow"
    found = []
    for case, pf in zip(cases, pf_results, strict=True):
        found += compare(str(case.folder), pf, run_flowkit(case, work))
    pf_sent, fk_sent = (
        canonical_requests(pf_judge.recorded()),
        canonical_requests(fk_judge.recorded()),
    )
    found += [f"request sent by pf only: {r}" for r in sorted(set(pf_sent) - set(fk_sent))]
    found += [f"request sent by flowkit only: {r}" for r in sorted(set(fk_sent) - set(pf_sent))]
    if not found and pf_sent != fk_sent:
        found.append("the same requests were sent a different number of times")
    return found


def test_every_difference_the_comparison_allows_is_documented() -> None:
    assert documented() >= DIFFERENCES_USED


def corpus_cases() -> list[Case]:
    cases = []
    for folder in sorted(p for p in CORPUS.iterdir() if (p / "flow.dag.yaml").is_file()):
        rows = [json.loads(line) for line in (folder / "data.jsonl").read_text().splitlines()]
        cases.append(Case(folder, rows))
    return cases


def test_the_hand_written_corpus_runs_as_in_prompt_flow(
    judges: tuple[LocalServer, LocalServer], tmp_path: Path
) -> None:
    cases = corpus_cases()
    assert len(cases) >= 6
    assert differences(cases, judges, tmp_path) == []
    assert len(judges[0].recorded()) >= 10  # the llm nodes did send requests


@settings(
    max_examples=BATCHES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: the failing folder is kept
    suppress_health_check=list(HealthCheck),
)
@given(flows=st.lists(pf_flows(), min_size=BATCH, max_size=BATCH))
def test_generated_flows_run_as_in_prompt_flow(
    flows: list[Generated],
    judges: tuple[LocalServer, LocalServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work = tmp_path_factory.mktemp("generated")
    cases = [Case(f.write(work / f"flow_{i:03d}"), f.rows) for i, f in enumerate(flows)]
    found = differences(cases, judges, work)
    assert found == [], "\n".join(found[:20])
