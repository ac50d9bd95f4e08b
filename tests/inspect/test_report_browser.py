"""The HTML report in a real browser: Debian's chromium, driven by playwright, opening the file
from file:// as a person would. One browser serves the whole module.

Set FLOWKIT_SCREENSHOTS=DIR to keep screenshots of the pages (the report, a row's trace, a
comparison) for a look by eye.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flowkit.inspect.compare import compare_runs
from flowkit.inspect.report import Limits, write_report
from flowkit.testing.server import LocalServer
from tests.report_runs import HTML, make_runs
from tests.support import read_json, read_jsonl

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (.ci/run installs it)",
)
# The closed network refuses Chromium's own background connections; keep it from making any.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROWS = "#rows-table tbody tr[data-line]"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, _server: LocalServer) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("browser-runs"), _server)


@pytest.fixture(scope="module")
def pages(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    write_report(runs["a"], out / "a.html")
    write_report(runs["a"], out / "compare.html", compare_with=runs["b"])
    write_report(runs["a"], out / "capped.html", limits=Limits(max_trace_rows=2))
    return {name: out / f"{name}.html" for name in ("a", "compare", "capped")}


@pytest.fixture(scope="module")
def browser(pages: dict[str, Path]) -> Iterator[Any]:
    # The pages (and the runs behind them) come first: the sync playwright API keeps an asyncio
    # loop running in this thread, and a flow run inside it could not start its own.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            args=ARGS,
            headless=True,
            viewport={"width": 1400, "height": 1000},
        )
        yield context
        context.close()


@dataclass
class Seen:
    """What a page did while it loaded and ran."""

    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    opened: list[Any] = []

    def _open(path: Path) -> tuple[Any, Seen]:
        page = browser.new_page()
        opened.append(page)
        seen = Seen()
        page.on("request", lambda r: seen.requests.append(r.url))
        page.on("requestfailed", lambda r: seen.failed.append(f"{r.url} {r.failure}"))
        page.on(
            "console",
            lambda m: (
                seen.console_errors.append(m.text) if m.type in ("error", "warning") else None
            ),
        )
        page.on("pageerror", lambda e: seen.page_errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_selector(ROWS)
        return page, seen

    yield _open
    for page in opened:
        page.close()


def shoot(page: Any, name: str, *, full: bool = True) -> None:
    folder = os.environ.get("FLOWKIT_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=full)


def lines(page: Any) -> list[int]:
    return [int(x) for x in page.locator(ROWS).evaluate_all("rs => rs.map(r => r.dataset.line)")]


def wait_for_lines(page: Any, expected: list[int]) -> None:
    from playwright.sync_api import expect

    expect(page.locator(ROWS)).to_have_count(len(expected))
    assert lines(page) == expected


def outputs(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {r["line"]: r for r in read_jsonl(run_dir / "outputs.jsonl")}


def shown(name: str, value: Any) -> str:
    """How a card shows a metric: rates in percent, counts whole, the rest to 4 digits."""
    key = name.rpartition(".")[2]
    if key.endswith("_rate"):
        return f"{value * 100:.1f}%"
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


def test_pages_load_offline_without_errors(open_page: Any, pages: dict[str, Path]) -> None:
    for path in pages.values():
        page, seen = open_page(path)
        assert page.locator("#app .card").count() > 0
        assert seen.page_errors == [] and seen.console_errors == []
        assert seen.failed == []
        assert seen.requests and all(u.startswith(("file:", "data:")) for u in seen.requests)
        page.close()


def test_cards_show_metrics_json(open_page: Any, pages: dict[str, Path], runs: dict) -> None:
    page, _ = open_page(pages["a"])
    shoot(page, "report.png")
    metrics = read_json(runs["a"] / "metrics.json")
    for name, value in metrics.items():
        card_text = page.locator(f'[data-metric="{name}"]').inner_text()
        assert shown(name, value) in card_text, name
    info = read_json(runs["a"] / "run.json")
    counts = info["counts"]
    fact = page.locator('[data-fact="rows"] .v').inner_text()
    assert fact == str(counts["rows"])
    failed = page.locator('[data-failed="judged"]').inner_text()
    assert failed.endswith(str(counts["failed"] + counts["bad_input"]))
    assert page.locator("#run-name").inner_text() == "a"
    assert (
        f"{info['tokens']['total_tokens']:,}" in page.locator('[data-fact="tokens"]').inner_text()
    )


def test_sorting_and_filtering(open_page: Any, pages: dict[str, Path], runs: dict) -> None:
    page, _ = open_page(pages["a"])
    recorded = outputs(runs["a"])
    wait_for_lines(page, sorted(recorded))
    scores = {n: (r["outputs"] or {}).get("score") for n, r in recorded.items()}
    scored = [n for n in sorted(recorded) if scores[n] is not None]
    unscored = [n for n in sorted(recorded) if scores[n] is None]
    sort = page.locator('th[data-col="o.score"] button')
    sort.click()
    wait_for_lines(page, sorted(scored, key=lambda n: (scores[n], n)) + unscored)
    sort.click()
    wait_for_lines(page, sorted(scored, key=lambda n: (-scores[n], n)) + unscored)
    assert page.locator('th[data-col="o.score"]').get_attribute("aria-sort") == "descending"
    page.locator('th[data-col="line"] button').click()
    wait_for_lines(page, sorted(recorded))

    page.select_option("#row-status", "failed")
    wait_for_lines(page, [n for n, r in sorted(recorded.items()) if r["status"] != "ok"])
    page.select_option("#row-status", "invalid")
    wait_for_lines(
        page, [n for n, r in recorded.items() if (r["outputs"] or {}).get("result") == "invalid"]
    )
    page.select_option("#row-status", "all")
    page.fill("#row-filter", "question NUMBER 4?")
    wait_for_lines(page, [4])
    page.fill("#row-filter", "")
    wait_for_lines(page, sorted(recorded))

    # A histogram bar lists the rows in its bin.
    page.locator('[data-hist="score"] .bin[data-bin="3"]').click()
    wait_for_lines(page, [n for n in sorted(recorded) if scores[n] == 3])
    page.locator("#range-filter button").click()
    wait_for_lines(page, sorted(recorded))


def test_data_that_is_html_shows_as_text(open_page: Any, pages: dict[str, Path]) -> None:
    page, _ = open_page(pages["a"])
    cell = page.locator(f'{ROWS}[data-line="4"] td', has_text="onerror").inner_text()
    assert cell.startswith(HTML)
    assert page.locator("#app img").count() == 0
    assert page.locator("#app b", has_text="bold").count() == 0
    assert "pwned" not in page.title()
    assert page.title().startswith("a ·")


def test_clicking_a_row_opens_its_trace(open_page: Any, pages: dict[str, Path], runs: dict) -> None:
    page, _ = open_page(pages["a"])
    drawer = page.locator("#trace")
    assert drawer.is_hidden()
    page.locator(f'{ROWS}[data-line="2"]').click()
    assert drawer.is_visible()
    shoot(page, "report-trace.png", full=False)
    records = sorted(
        (r for r in read_jsonl(runs["a"] / "traces.jsonl") if r["line"] == 2),
        key=lambda r: r["start"],
    )
    names = page.locator("#trace details.node").evaluate_all("ds => ds.map(d => d.dataset.node)")
    assert sorted(names) == sorted(r["node"] for r in records)
    top = [n for n in names if "." not in n]
    assert top == [r["node"] for r in records if "." not in r["node"]]
    nested = drawer.locator(
        'details.node[data-node="check"] details.node[data-node="check.measure"]'
    )
    assert nested.count() == 1
    assert "failed" in (nested.get_attribute("class") or "")
    by_node = {r["node"]: r for r in records}
    assert by_node["check.measure"]["error"]["message"] in nested.inner_text()
    assert "x=2 is not allowed here" in page.locator("#row-error").inner_text()
    judge = drawer.locator('details.node[data-node="judge"]').inner_text()
    for message in by_node["judge"]["llm"]["messages"]:
        assert message["content"] in judge
    assert by_node["judge"]["output"] in judge
    usage = by_node["judge"]["llm"]["usage"]
    assert f"tokens: {usage['prompt_tokens']} prompt + {usage['completion_tokens']}" in judge
    page.keyboard.press("Escape")
    assert drawer.is_hidden()
    # The next row through the drawer's own arrow.
    page.locator(f'{ROWS}[data-line="0"]').click()
    page.locator("#trace button[title^='next row']").click()
    assert drawer.get_attribute("data-line") == "1"
    assert "more chars)" in drawer.locator('details.node[data-node="judge"]').inner_text()


def test_a_row_without_an_embedded_trace_says_how_to_see_it(
    open_page: Any, pages: dict[str, Path], runs: dict
) -> None:
    page, _ = open_page(pages["capped"])
    recorded = outputs(runs["a"])
    plain = next(n for n, r in sorted(recorded.items()) if r["status"] == "ok")
    assert "Node traces are embedded for 2 rows" in page.locator("#rows").inner_text()
    page.locator(f'{ROWS}[data-line="{plain}"]').click()
    assert f"flowkit trace a --row {plain}" in page.locator("#trace-missing").inner_text()


def test_a_compare_report_shows_deltas_and_verdicts(
    open_page: Any, pages: dict[str, Path], runs: dict
) -> None:
    page, _ = open_page(pages["compare"])
    shoot(page, "report-compare.png")
    expected = compare_runs(runs["a"], runs["b"])
    assert {m.verdict for m in expected.metrics} > {"better"}  # length grew on every row
    for m in expected.metrics:
        row = page.locator(f'#compare-metrics tr[data-output="{m.name}"]').inner_text()
        assert f"{m.delta:+.4g}" in row and m.verdict in row
    changes = page.locator("#compare-changes tbody tr")
    assert changes.count() == len(expected.changes)
    changes.first.click()
    assert page.locator("#trace").get_attribute("data-line") == str(expected.changes[0].line_a)


def test_notices_follow_the_metrics_folded(
    open_page: Any, runs: dict[str, Path], tmp_path: Path
) -> None:
    import json
    import shutil

    run = tmp_path / "noticed"
    shutil.copytree(runs["a"], run)
    info = read_json(run / "run.json")
    info["notices"] = ["warning: a notice the run left"]
    (run / "run.json").write_text(json.dumps(info), encoding="utf-8")
    page, _ = open_page(write_report(run, tmp_path / "noticed.html").path)
    fold = page.locator("#metrics details#notices")
    assert fold.locator("summary").inner_text().startswith("1 notice")
    assert fold.get_attribute("open") is None  # folded until asked for
    assert not page.locator("#notices li").is_visible()
    after_cards = page.evaluate(
        "() => !!(document.querySelector('#metrics .cards')"
        ".compareDocumentPosition(document.querySelector('#notices'))"
        " & Node.DOCUMENT_POSITION_FOLLOWING)"
    )
    assert after_cards
    fold.locator("summary").click()
    assert page.locator("#notices li").inner_text() == "warning: a notice the run left"
