"""The review server over real HTTP (no browser): the token, idempotent labels, undo, the
draws, the budget, and `flowkit agree RUN` reading what review wrote."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from click.testing import CliRunner

import flowkit
from flowkit.cli.main import main
from flowkit.errors import UsageError
from flowkit.review.rows import open_review
from flowkit.review.server import make_app
from tests.support import read_jsonl, write, write_jsonl

FLOW = """
name: two
inputs: {v: {type: integer}, w: {type: integer}}
outputs: {score: ${j.output.a}, other: ${j.output.b}, reason: ${j.output.r}}
nodes:
  - {name: j, type: python, source: j.py, function: j, inputs: {v: ${inputs.v}, w: ${inputs.w}}}
"""
JUDGES = "def j(v, w):\n    return {'a': v, 'b': w, 'r': 'because'}\n"
ROWS = 30


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    flow = write(tmp_path / "two.yaml", FLOW)
    write(tmp_path / "j.py", JUDGES)
    rows = [{"v": 1 + i % 5, "w": 1 + (i * 2) % 5} for i in range(ROWS)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    return flowkit.run(flow, data, runs_root=tmp_path / "runs", name="r").run_dir


def _with_client(run_dir: Path, test: Callable[[TestClient], Awaitable[None]], **kw: Any) -> None:
    review = open_review(
        run_dir, kw.get("output"), kw.get("draw", "random"), 0, kw.get("width"), False, "me"
    )

    async def go() -> None:
        async with TestClient(TestServer(make_app(review, "tok"))) as client:
            await test(client)

    asyncio.run(go())


def test_every_route_needs_the_token(run_dir: Path) -> None:
    async def test(client: TestClient) -> None:
        for path in ("/", "/api/state", "/api/row/0"):
            assert (await client.get(path)).status == 403
            assert (await client.get(path, params={"token": "wrong"})).status == 403
            assert (await client.get(path, params={"token": "tok"})).status == 200

    _with_client(run_dir, test)


def test_a_repeated_label_is_written_once_and_undo_withdraws_it(run_dir: Path) -> None:
    async def test(client: TestClient) -> None:
        body = {"label_id": "a1", "line": 3, "value": 2}
        for _ in range(3):  # a retried POST (a refresh mid-request, a second tab's retry)
            reply = await client.post("/api/label", params={"token": "tok"}, json=body)
            assert reply.status == 200
        state = await reply.json()
        assert state["labelled"] == {"3": 2.0} and state["done"] == 1
        for _ in range(2):
            reply = await client.post("/api/undo", params={"token": "tok"}, json={"label_id": "a1"})
        assert (await reply.json())["labelled"] == {}
        bad = await client.post(
            "/api/label", params={"token": "tok"}, json={"label_id": "a2", "line": 3, "value": 9}
        )
        assert (
            bad.status == 400
            and await bad.text() == "9 is not on the scale [1.0, 2.0, 3.0, 4.0, 5.0]"
        )

    _with_client(run_dir, test)
    records = read_jsonl(run_dir / "labels.jsonl")
    assert [(r["label_id"], bool(r.get("undo"))) for r in records] == [("a1", False), ("a1", True)]


def test_the_score_draw_takes_every_level_in_turn(run_dir: Path) -> None:
    review = open_review(run_dir, None, "score", 0, None, False, "me")
    scores = [review.rows[line]["outputs"]["score"] for line in review.order]
    assert scores[:10] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    assert review.state()["uniform"] is False  # the page warns: not what PPI++ assumes
    assert open_review(run_dir, None, "random", 0, None, False, "me").state()["uniform"] is True


def test_the_disagreement_draw_puts_the_widest_split_first(run_dir: Path) -> None:
    review = open_review(run_dir, None, "disagreement", 0, None, False, "me")
    outputs = [review.rows[line]["outputs"] for line in review.order]
    gaps = [abs(o["score"] - o["other"]) for o in outputs]
    assert gaps == sorted(gaps, reverse=True) and gaps[0] > gaps[-1]


def test_the_budget_shrinks_the_interval_to_the_width_asked(run_dir: Path) -> None:
    async def test(client: TestClient) -> None:
        outputs = {r["line"]: r["outputs"] for r in read_jsonl(run_dir / "outputs.jsonl")}
        state: dict[str, Any] = {}
        for n, line in enumerate(sorted(outputs)[:8]):
            value = max(1, outputs[line]["score"] - n % 2)
            body = {"label_id": f"b{n}", "line": line, "value": value}
            state = await (
                await client.post("/api/label", params={"token": "tok"}, json=body)
            ).json()
        budget = state["budget"]
        lo, hi = budget["interval"]
        assert budget["width"] == 0.3 and hi - lo > 0.3 and budget["more"] > 0

    _with_client(run_dir, test, width=0.3)


def test_an_unknown_output_is_refused(run_dir: Path) -> None:
    with pytest.raises(UsageError) as err:
        open_review(run_dir, "scor", "random", 0, None, False, "me")
    assert str(err.value) == (
        "--output 'scor' is not a scored output of the run (did you mean 'score'?)\n"
        "  hint: scored outputs: other, score"
    )


def test_agree_reads_what_review_wrote(run_dir: Path) -> None:
    none = CliRunner().invoke(main, ["agree", str(run_dir)])
    assert none.exit_code == 2 and none.stderr == (
        "error: run 'r' has no labels yet\n"
        "  hint: pass --labels FILE, or label rows with `flowkit review RUN`\n"
    )

    async def test(client: TestClient) -> None:
        for line in range(12):
            body = {"label_id": f"c{line}", "line": line, "value": 1 + line % 5}
            assert (await client.post("/api/label", params={"token": "tok"}, json=body)).ok

    _with_client(run_dir, test)
    out = CliRunner().invoke(main, ["agree", str(run_dir), "--json"])
    figures = json.loads(out.stdout)["outputs"]["score"]
    assert figures["n"] == 12 and figures["accuracy"] == 1.0  # the labels equal the judge here
