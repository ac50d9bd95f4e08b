"""What a CI job reads besides the exit code: a markdown summary (GitHub's step summary) and
JUnit XML, each check (gate, failed rows, export) one line or one test case."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flowkit.errors import UsageError
from flowkit.inspect.compare_means import AggregateDelta
from flowkit.inspect.compare_rows import is_number
from flowkit.inspect.gates import Outcome

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # a terminal colour or cursor sequence
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _plain(text: str) -> str:
    """Text as a CI page shows it: without terminal colours, and without the control
    characters XML 1.0 cannot hold (an exception's message may carry both; one of them makes
    the whole JUnit file unreadable)."""
    return _NOT_XML.sub("", _ANSI.sub("", text))


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    text = f"{value:.4g}" if isinstance(value, float) else _plain(str(value))
    # `<` would open an HTML tag on GitHub's page (`polite.c<d>` shown as `polite.c`).
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def markdown(
    title: str,
    outcomes: Sequence[Outcome],
    metrics: dict[str, Any],
    baseline: dict[str, Any] | None = None,
    changes: Sequence[AggregateDelta] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The summary: the verdict first, then each check, then the metrics (beside the
    baseline's when there is one, with each change's interval and verdict where the comparison
    with it gives them: the `compare` table's)."""
    failed = [o for o in outcomes if not o.passed]
    verdict = f"❌ {len(failed)} of {len(outcomes)} checks failed" if failed else "✅ passed"
    lines = [f"### {title}: {verdict}", ""]
    # What makes the verdicts doubtful (the paired rows are not the same rows) comes first.
    lines += [*(f"> {_cell(n)}" for n in notes), ""] if notes else []
    if outcomes:
        lines += ["| check | result |", "|---|---|"]
        for o in outcomes:
            said = o.message.removeprefix(f"{o.name}: ")
            lines.append(f"| {_cell(o.name)} | {'✅' if o.passed else '❌'} {_cell(said)} |")
        lines.append("")
    if baseline is None:
        lines += ["| metric | value |", "|---|---:|"]
        lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in metrics.items()]
    elif changes is None:
        lines += ["| metric | baseline | this run | change |", "|---|---:|---:|---:|"]
        for name in dict.fromkeys([*baseline, *metrics]):
            a, b = baseline.get(name), metrics.get(name)
            change = f"{b - a:+.4g}" if is_number(a) and is_number(b) else "—"
            lines.append(f"| {_cell(name)} | {_cell(a)} | {_cell(b)} | {change} |")
    else:
        lines += [
            "| metric | baseline | this run | change | interval | verdict |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for d in changes:
            change = "—" if d.delta is None else f"{d.delta:+.4g}"
            ci = "—" if d.ci_low is None else f"[{d.ci_low:+.4g}, {d.ci_high:+.4g}]"
            said = "—" if d.ci_low is None else d.verdict
            row = f"| {_cell(d.name)} | {_cell(d.a)} | {_cell(d.b)} | {change} | {ci} | {said} |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def junit(suite: str, outcomes: Sequence[Outcome]) -> str:
    """JUnit XML: one test case per check, a failure element carrying its message."""
    failures = sum(not o.passed for o in outcomes)
    root = ET.Element("testsuites", tests=str(len(outcomes)), failures=str(failures))
    node = ET.SubElement(
        root, "testsuite", name=suite, tests=str(len(outcomes)), failures=str(failures)
    )
    for o in outcomes:
        case = ET.SubElement(node, "testcase", classname=suite, name=_plain(o.name))
        message = _plain(o.message)
        if o.passed:
            ET.SubElement(case, "system-out").text = message
        else:
            ET.SubElement(case, "failure", message=message).text = message
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_summary(text: str, path: str | None) -> str | None:
    """Write the summary to ``path``, else append it to $GITHUB_STEP_SUMMARY (as GitHub
    expects: several steps add to one page); the place written, or None to print it."""
    target = path or os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    mode = "w" if path else "a"
    write_ci_file(Path(target), text, mode)
    return target


def check_writable(*paths: str | None) -> None:
    """Refuse, before any row runs, a CI file that could not be written after the run: a
    folder, or a place whose folder cannot be made (made now, as it would be then) or written."""
    for given in paths:
        if not given:
            continue
        path = Path(given)
        if path.is_dir():
            raise UsageError(f"cannot write {given!r}: it is a folder; give a file's path")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError(f"cannot write {given!r}: {err.strerror or err}") from err
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise UsageError(f"cannot write {given!r}: its folder is not writable")


def write_ci_file(path: Path, text: str, mode: str = "w") -> None:
    """Write a file a CI job reads, making its folder (`reports/junit.xml`); a place that
    cannot be written is one error line, not a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open(mode, encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        raise UsageError(f"cannot write {str(path)!r}: {err.strerror or err}") from err
