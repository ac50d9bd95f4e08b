"""`flowkit review` in a real browser (Debian's chromium through playwright): labels typed by
keyboard land in RUN/labels.jsonl exactly once each, across a reload and a server killed
mid-way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flowkit
from tests.inspect.test_report_browser import ARGS, CHROMIUM
from tests.support import REPO, read_jsonl, write, write_jsonl

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (.ci/run installs it)",
    ),
    pytest.mark.slow,  # a browser and a server process each: about 4 s a test
]
ROWS = 20
FLOW = """
name: judged
inputs:
  {question: {type: string}, answer: {type: string}, context: {type: string}, v: {type: integer}}
outputs: {score: ${judge.output.score}, reason: ${judge.output.reason}}
nodes:
  - {name: judge, type: python, source: judge.py, function: judge, inputs: {v: ${inputs.v}}}
"""
JUDGE = "def judge(v):\n    return {'score': v, 'reason': f'the judge says {v}'}\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("review")
    flow = write(root / "judged.yaml", FLOW)
    write(root / "judge.py", JUDGE)
    rows = [
        {"question": f"q{i}", "answer": f"answer {i}", "context": f"context {i}", "v": 1 + i % 5}
        for i in range(ROWS)
    ]
    data = write_jsonl(root / "data.jsonl", rows)
    return flowkit.run(flow, data, runs_root=root / "runs", name="r", cache_dir=root / "c").run_dir


@pytest.fixture
def fresh_run(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of the run, so each test starts with no labels."""
    import shutil

    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`flowkit review` in its own process, as a user starts it."""

    def __init__(self, run: Path, port: int, token: str, *more: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flowkit.cli",
                "review",
                str(run),
                "--port",
                str(port),
                "--token",
                token,
                "--annotator",
                "tester",
                *more,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "?token=" in line, line
        self.url = line.rsplit(" ", 1)[1].strip()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=ARGS, headless=True
        )
        yield context
        context.close()


def _label(page: Any, count: int, start: int) -> list[int]:
    """Type ``count`` scores; each moves the page to the next row. Returns the rows labelled."""
    from playwright.sync_api import expect

    done = []
    for i in range(count):
        line = int(page.locator("#row-line").inner_text())
        done.append(line)
        page.keyboard.press(str(1 + (line + i) % 5))
        expect(page.locator("#progress")).to_have_text(f"{start + i + 1} / {ROWS} labelled")
    return done


def _labels(run: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(run / "labels.jsonl") if not r.get("undo")]


def test_ten_labels_a_reload_and_five_more_make_exactly_fifteen(
    browser: Any, fresh_run: Path
) -> None:
    from playwright.sync_api import expect

    server = Server(fresh_run, _free_port(), "t0ken")
    try:
        page = browser.new_page()
        page.goto(server.url)
        expect(page.locator("#progress")).to_have_text(f"0 / {ROWS} labelled")
        first = _label(page, 10, 0)
        expect(page.locator("#saved")).to_have_text("all saved")
        page.reload()
        expect(page.locator("#progress")).to_have_text(f"10 / {ROWS} labelled")
        resumed = int(page.locator("#row-line").inner_text())
        assert resumed not in first  # resumes at a row not yet labelled
        page.keyboard.press("j")  # move on and back: nothing is labelled by moving
        page.keyboard.press("k")
        expect(page.locator("#row-line")).to_have_text(str(resumed))
        second = _label(page, 5, 10)
        expect(page.locator("#saved")).to_have_text("all saved")
    finally:
        server.stop()
    labels = _labels(fresh_run)
    assert len(labels) == 15
    assert sorted(r["line"] for r in labels) == sorted(first + second)
    assert len({r["label_id"] for r in labels}) == 15
    assert all(r["annotator"] == "tester" for r in labels)


def test_a_killed_server_loses_no_label_and_the_page_sends_the_rest(
    browser: Any, fresh_run: Path
) -> None:
    from playwright.sync_api import expect

    port = _free_port()
    server = Server(fresh_run, port, "k1ll")
    page = browser.new_page()
    page.goto(server.url)
    before = _label(page, 6, 0)
    expect(page.locator("#saved")).to_have_text("all saved")
    server.kill()  # SIGKILL: no chance to flush anything
    assert sorted(r["line"] for r in _labels(fresh_run)) == sorted(before)
    during = _label(page, 3, 6)  # typed while the server is down: kept by the page
    expect(page.locator("#saved")).to_have_text("3 not saved yet (retrying)")
    again = Server(fresh_run, port, "k1ll")
    try:
        expect(page.locator("#saved")).to_have_text("all saved", timeout=15000)
        page.keyboard.press("u")  # undo the last label
        expect(page.locator("#progress")).to_have_text(f"8 / {ROWS} labelled")
        expect(page.locator("#saved")).to_have_text("all saved")
    finally:
        again.stop()
    records = read_jsonl(fresh_run / "labels.jsonl")
    kept = [r for r in records if not r.get("undo")]
    assert sorted(r["line"] for r in kept) == sorted(before + during)
    assert len({r["label_id"] for r in kept}) == 9
    undone = [r for r in records if r.get("undo")]
    assert [u["label_id"] for u in undone] == [kept[-1]["label_id"]]


def test_a_server_restarted_with_another_token_drops_no_queued_label(
    browser: Any, fresh_run: Path
) -> None:
    """Labels typed while the server was down, sent to one restarted with a new token (a
    403), stay queued in the page until a server with the page's token takes them."""
    from playwright.sync_api import expect

    port = _free_port()
    server = Server(fresh_run, port, "first")
    page = browser.new_page()
    page.goto(server.url)
    before = _label(page, 2, 0)
    expect(page.locator("#saved")).to_have_text("all saved")
    server.kill()
    during = _label(page, 3, 2)
    other = Server(fresh_run, port, "second")  # `flowkit review` again: a new token
    try:
        expect(page.locator("#saved")).to_contain_text("3 not saved", timeout=15000)
        expect(page.locator("#saved")).to_contain_text("--token first")
    finally:
        other.stop()
    assert sorted(r["line"] for r in _labels(fresh_run)) == sorted(before)
    again = Server(fresh_run, port, "first")
    try:
        expect(page.locator("#saved")).to_have_text("all saved", timeout=15000)
    finally:
        again.stop()
    assert sorted(r["line"] for r in _labels(fresh_run)) == sorted(before + during)


def test_hidden_judges_show_once_the_row_is_labelled(browser: Any, fresh_run: Path) -> None:
    from playwright.sync_api import expect

    server = Server(fresh_run, _free_port(), "h1de", "--hide-judge")
    try:
        page = browser.new_page()
        page.goto(server.url)
        expect(page.locator("#progress")).to_have_text(f"0 / {ROWS} labelled")
        line = page.locator("#row-line").inner_text()
        expect(page.locator("#answer")).to_have_text(f"answer {line}")
        expect(page.locator("#judges")).to_contain_text("hidden until you label this row")
        page.keyboard.press("3")
        expect(page.locator("#progress")).to_have_text(f"1 / {ROWS} labelled")
        page.keyboard.press("k")  # back to the row just labelled: its judge is shown now
        expect(page.locator("#row-line")).to_have_text(line)
        expect(page.locator("#judges")).to_contain_text("the judge says")
        expect(page.locator("#scale button.chosen")).to_have_text("3")
    finally:
        server.stop()
