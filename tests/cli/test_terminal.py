"""Nothing hostile reaches the terminal: data with ESC sequences is shown escaped, and data that
looks like rich markup is printed as text (and cannot crash a run after it completed)."""

from __future__ import annotations

from pathlib import Path

from flowkit.cli.terminal import plain
from tests.support import start_flowkit, write, write_jsonl

FLOW = """
    name: evil
    inputs: {x: {type: any}}
    outputs: {y: ${n.output}}
    nodes:
      - {name: n, type: python, source: m.py, function: f, inputs: {x: ${inputs.x}}}
      - {name: agg, type: aggregate, source: m.py, function: agg, inputs: {ys: ${n.output}}}
    """
NODES = r"""
def f(x):
    if x == 2:
        raise ValueError("boom \x1b]0;TITLE\x07 [link=http://evil]click[/link] a[/]b")
    return "out \x1b]52;c;aGVsbG8=\x07 \x1b[2J [red]x[/red]"


def agg(ys):
    return {"a[/]b": 1, "\x1b[2Jclear": 2, "[link=http://e]m[/link]": 3}
"""


def _flowkit(cwd: Path, *args: str) -> tuple[int, str]:
    proc = start_flowkit(cwd, *args)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out + err


def test_escape_sequences_and_markup_in_data_are_shown_as_text(tmp_path: Path) -> None:
    write(tmp_path / "f.yaml", FLOW)
    write(tmp_path / "m.py", NODES)
    write_jsonl(tmp_path / "d.jsonl", [{"x": 1}, {"x": 2}])
    code, out = _flowkit(
        tmp_path, "run", "f.yaml", "--data", "d.jsonl", "--name", "e", "--gate", "evil.a[/]b>=1",
        "--fail-on-error", "1",
    )  # fmt: skip
    assert code == 0, out
    assert "gate evil.a[/]b>=1: passed (evil.a[/]b = 1)" in out
    assert "evil.\\x1b[2Jclear" in out and "evil.[link=http://e]m[/link]" in out
    outputs = [out]
    for args in (
        ["show", "e"],
        ["trace", "e", "--row", "0"],
        ["trace", "e", "--failed"],
        ["compare", "e", "e"],
    ):
        code, text = _flowkit(tmp_path, *args)
        assert code == 0, text
        outputs.append(text)
    assert "output: out \\x1b]52;c;aGVsbG8= \\x1b[2J [red]x[/red]" in outputs[2]
    assert "boom \\x1b]0;TITLE [link=http://evil]click[/link] a[/]b" in outputs[3]
    for text in outputs:
        assert "\x1b" not in text and "Traceback" not in text


def test_plain_escapes_what_a_terminal_acts_on() -> None:
    assert plain("a\x1b[2Jb\x9b\u202ec\td\n") == "a\\x1b[2Jb\\x9b\\u202ec\td\n"
