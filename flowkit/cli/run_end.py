"""What `flowkit run` prints when the run ends, and whether it ends in failure.

An honest end: the metrics, one summary line with every count (invalid too), the errors
grouped by node and type (as `flowkit show` prints them), the commands that help next, and
exit 1 when no row produced a value: a run where every call failed is not a success.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowkit.cli.terminal import console, err_console, styled
from flowkit.inspect.show import metrics_table


def report_end(result: Any, verbose: bool = False) -> None:
    for note in result.info.get("notes") or () if verbose else ():
        err_console.print(f"note: {note}", highlight=False)
    failed = [
        f"warning: aggregate node {qual!r} failed: "
        for qual, detail in (result.info.get("aggregates") or {}).items()
        if detail.get("status") == "failed"
    ]
    for notice in result.info.get("notices") or ():
        if notice.startswith(tuple(failed)):
            continue  # check_run says it once, as the error it is
        label = "" if notice.startswith("warning: ") else "note: "
        err_console.print(f"{label}{notice}", highlight=False)
    if result.counts.get("bad_input"):
        _report_bad_rows(result)
    console.print(metrics_table(result.metrics, result.info))
    c = result.counts
    console.print(
        f"rows {c['rows']}: {c['succeeded']} ok, {c['failed']} failed, "
        f"{c['bad_input']} bad input, {c.get('invalid', 0)} invalid; cache hits {c['cache_hits']}"
    )
    cost = (result.info.get("cost") or {}).get("usd")
    if cost is not None and "online_usd" in result.info["cost"]:
        from flowkit.inspect.show import batch_note

        console.print(f"cost ≈ ${cost:.4f} {batch_note(result.info)}", highlight=False)
    # A folder in an object store is named by its URL: the local one is only its staging copy.
    console.print(f"run folder: {result.info.get('location') or result.run_dir}")
    if c["failed"]:
        from flowkit.inspect.trace_view import show_sections  # reads the traces: only now

        errors = show_sections(result.run_dir, result.info, {}).errors
        if errors is not None:
            err_console.print(errors)
    hints = []
    ref = run_ref(result)
    if c["failed"] or c["bad_input"]:
        hints.append(f"see the failed rows: flowkit trace {ref} --failed")
    if c.get("invalid"):
        hints.append(f"see unreadable judge answers: flowkit show {ref}")
    if c["failed"]:
        hints.append(f"once the cause is fixed: flowkit run --resume {ref}")
    for hint in hints:
        err_console.print(f"hint: {hint}", highlight=False)


def run_ref(result: Any) -> str:
    """How a later command names this run: its name when that finds this folder (under runs/),
    else its path (a run written with --output elsewhere)."""
    from flowkit.errors import UsageError
    from flowkit.runs.folder import resolve_run_dir

    if result.info.get("location"):  # in an object store (its staging copy is not the run)
        return shlex.quote(str(result.info["location"]))
    try:
        if resolve_run_dir(result.run_id).resolve() == Path(result.run_dir).resolve():
            return str(result.run_id)
    except UsageError:
        pass
    return shlex.quote(str(result.run_dir))


def exit_if_valueless(result: Any) -> None:
    if result.counts.get("rows") and not result.produced_values:
        err_console.print(
            styled("[bold red]error:[/]"),
            f"no row produced a value ({result.summary()}); exiting 1",
            highlight=False,
        )
        sys.exit(1)


def _report_bad_rows(result: Any, shown: int = 5) -> None:
    """Bad data rows were skipped, not run: say which, so they are not mistaken for scores."""
    bad = [r for r in result.rows() if r.get("status") == "bad_input"]
    err_console.print(
        f"warning: {len(bad)} bad data row(s) were not run (--strict stops on them instead):",
        highlight=False,
    )
    for row in bad[:shown]:
        err_console.print(f"  {(row.get('error') or {}).get('message')}")
    if len(bad) > shown:
        more = len(bad) - shown
        err_console.print(f"  … and {more} more: flowkit trace {run_ref(result)} --failed")


@dataclass
class Checks:
    """What decides a run's exit code besides its values, and where CI reads the verdicts."""

    gates: list[Any] = field(default_factory=list)
    drops: list[Any] = field(default_factory=list)
    baseline: Any = None
    lower_is_better: tuple[str, ...] = ()
    fail_on_error: float | None = None
    otel: bool = False
    summary: str | None = None
    summary_file: str | None = None
    junit: str | None = None
    comparison: Any = None
    """The comparison with the baseline the gates read, whose verdicts the summary shows."""

    def __post_init__(self) -> None:
        if not (self.summary_file or self.junit):
            return  # the CI report's module (XML, the comparisons) loads only when asked for
        from flowkit.inspect.ci_report import check_writable

        check_writable(self.summary_file, self.junit)  # not found out after a (maybe paid) run


def check_run(result: Any, checks: Checks) -> None:
    """Every check the run can still answer, each printed; exit 1 when any failed. A failed
    export or aggregate fails the run but never hides a gate's verdict."""
    from flowkit.inspect.gates import Outcome

    outcomes: list[Outcome] = []
    if checks.otel:  # before the gates, so a failing CI run is exported too
        outcomes.append(_export(result))
    for qual, detail in (result.info.get("aggregates") or {}).items():
        if detail.get("status") == "failed":
            why = detail.get("error", "")
            outcomes.append(Outcome(f"aggregate {qual}", False, f"aggregate {qual!r}: {why}"))
    valueless = bool(result.counts.get("rows")) and not result.produced_values
    if checks.fail_on_error is not None and not valueless:  # that has its own error
        over = result.failed_ratio > checks.fail_on_error
        c = result.counts
        message = (
            f"{c.get('failed', 0) + c.get('bad_input', 0)} of {c.get('rows', 0)} rows "
            f"({result.failed_ratio:.1%}) failed or were bad input, "
            + ("more than" if over else "within")
            + f" --fail-on-error {checks.fail_on_error:g}"
        )
        if over and not checks.fail_on_error:
            message += " (the default: give a ratio to accept some)"
        some = result.failed_ratio > 0
        outcomes.append(Outcome("failed rows", not over, message, shown=over or some))
    outcomes += _gate_outcomes(result, checks)
    print_outcomes(outcomes)
    _write_ci_files(result, checks, outcomes)
    exit_if_valueless(result)
    if any(not o.passed for o in outcomes):
        sys.exit(1)


def print_outcomes(outcomes: list[Any]) -> None:
    for o in outcomes:
        if not o.shown:
            continue
        if o.passed:
            err_console.print(o.message, highlight=False)
        else:
            err_console.print(styled("[bold red]error:[/]"), o.message, highlight=False)


def _export(result: Any) -> Any:
    from flowkit.errors import FlowkitError
    from flowkit.inspect.gates import Outcome
    from flowkit.inspect.otel import export_run

    try:
        summary = export_run(result.run_dir)
    except FlowkitError as err:
        return Outcome("otel export", False, f"otel export failed: {err.message}")
    return Outcome("otel export", True, str(summary))


def _gate_outcomes(result: Any, checks: Checks) -> list[Any]:
    from flowkit.inspect.gates import Outcome, outcome

    outcomes = []
    for gate in checks.gates:
        passed, message = outcome(gate, result.metrics)
        outcomes.append(Outcome(f"gate {gate}", passed, message))
    summary = checks.summary == "md" or checks.summary_file
    if checks.baseline is not None and (checks.drops or summary):  # the summary's verdicts too
        from flowkit.inspect.regression import judge

        cmp = checks.comparison = compare_with_baseline(result.run_dir, checks)
        for note in cmp.notes:  # rows paired by line that are not the same rows, say
            err_console.print(note, highlight=False)
        outcomes += judge(
            checks.drops, cmp, checks.baseline, result.metrics, checks.lower_is_better
        )
    return outcomes


def compare_with_baseline(run_dir: Any, checks: Checks) -> Any:
    from flowkit.inspect.compare import compare_runs
    from flowkit.inspect.compare_rows import read_side
    from flowkit.inspect.regression import needed_outputs
    from flowkit.runs.folder import read_metrics

    here = read_side(run_dir, None).names
    names = [n for n in needed_outputs(checks.drops, checks.baseline) if n in here]
    # A metric of metrics.json turns its verdict too (a defect rate): the gates read that.
    metrics = {*checks.baseline.metrics, *read_metrics(run_dir)}
    lower = [n for n in checks.lower_is_better if n in names or n in metrics]
    return compare_runs(checks.baseline.run_dir, run_dir, metrics=names, lower_is_better=lower)


def _write_ci_files(result: Any, checks: Checks, outcomes: list[Any]) -> None:
    flow = (result.info.get("flow") or {}).get("name", "")
    title = f"flowkit run {result.run_id} ({flow})"
    if checks.baseline is not None:
        title += f" vs baseline {checks.baseline.run_dir.name}"
    write_ci_files(title, result.metrics, checks, outcomes)


def write_ci_files(
    title: str, metrics: dict[str, Any], checks: Checks, outcomes: list[Any]
) -> None:
    """The markdown summary and the JUnit XML a CI job asked for (run and compare alike)."""
    if not (checks.summary == "md" or checks.summary_file or checks.junit):
        return
    from flowkit.inspect.ci_report import junit, markdown, write_ci_file, write_summary

    if checks.summary == "md" or checks.summary_file:  # a file asked for is a summary asked for
        base = checks.baseline.metrics if checks.baseline is not None else None
        changes = checks.comparison.aggregates if checks.comparison is not None else None
        notes = checks.comparison.notes if checks.comparison is not None else []
        text = markdown(title, outcomes, metrics, base, changes, notes)
        written = write_summary(text, checks.summary_file)
        if written is None:
            sys.stdout.write(text)
        else:
            err_console.print(f"summary: {written}", highlight=False)
    if checks.junit:
        write_ci_file(Path(checks.junit), junit("flowkit", outcomes))
        err_console.print(f"junit: {checks.junit}", highlight=False)
