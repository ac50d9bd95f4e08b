"""The HTML report's "judge vs people" section: its data, and the page in a real browser."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from flowkit.inspect.report import build_report, write_report
from flowkit.labels.report import MOST
from flowkit.testing.server import LocalServer
from tests.inspect.test_report_browser import ARGS, CHROMIUM
from tests.labels.test_agree import _rows
from tests.support import read_jsonl, run_builtin, write_jsonl


@pytest.fixture
def labelled(llm_server: LocalServer, tmp_path: Path) -> tuple[Path, dict[int, float]]:
    """A judged run whose labels (RUN/labels.jsonl) differ from the judge by 0, 1 or 2."""
    run_dir = run_builtin(
        "groundedness", write_jsonl(tmp_path / "d.jsonl", _rows()), tmp_path
    ).run_dir
    judge = {r["line"]: r["outputs"]["score"] for r in read_jsonl(run_dir / "outputs.jsonl")}
    people = {line: float(max(1, judge[line] - line % 3)) for line in list(judge)[:12]}
    write_jsonl(
        run_dir / "labels.jsonl",
        [{"label_id": f"l{line}", "line": line, "score": v} for line, v in people.items()],
    )
    return run_dir, people


def test_the_section_lists_the_rows_that_disagree_most(
    labelled: tuple[Path, dict[int, float]],
) -> None:
    run_dir, people = labelled
    data = build_report(run_dir)["judge_vs_people"]
    figures = data["outputs"]["score"]
    assert figures["n"] == len(people)
    judge = {r["line"]: r["outputs"]["score"] for r in read_jsonl(run_dir / "outputs.jsonl")}
    gaps = sorted(
        ((abs(people[line] - judge[line]), line) for line in people if people[line] != judge[line]),
        key=lambda g: (-g[0], g[1]),
    )
    assert [d["line"] for d in figures["disagree"]] == [line for _, line in gaps[:MOST]]
    assert sum(map(sum, figures["confusion"]["matrix"])) == len(people)


def test_a_run_without_labels_has_no_section(llm_server: LocalServer, tmp_path: Path) -> None:
    run_dir = run_builtin(
        "groundedness", write_jsonl(tmp_path / "d.jsonl", _rows(3)), tmp_path
    ).run_dir
    assert build_report(run_dir)["judge_vs_people"] is None


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_the_section_in_a_browser_links_each_row_to_its_trace(
    labelled: tuple[Path, dict[int, float]], tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    run_dir, _ = labelled
    page_file = write_report(run_dir, tmp_path / "report.html").path
    errors: list[Any] = []
    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=ARGS, headless=True
        )
        page = context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        section = page.locator("#judge-vs-people")
        expect(section.locator("h2")).to_have_text("Judge vs people")
        levels = build_report(run_dir)["judge_vs_people"]["outputs"]["score"]["confusion"]["levels"]
        expect(section.locator("td.heat")).to_have_count(len(levels) ** 2)
        expect(section.locator("tr[data-estimate='corrected (PPI++)']")).to_have_count(1)
        first = section.locator("a[href^='#row=']").first
        line = first.inner_text().removeprefix("row ")
        first.click()
        expect(page.locator("#trace-title")).to_contain_text(f"Row {line}")
        context.close()
    assert errors == []
