"""What `flowkit run` prints when the run ends, and whether it ends in failure.

An honest end: the metrics, one summary line with every count (invalid too), the errors
grouped by node and type (as `flowkit show` prints them), the commands that help next, and
exit 1 when no row produced a value: a run where every call failed is not a success.
"""

from __future__ import annotations

import sys
from typing import Any

from flowkit.cli.terminal import console, err_console, styled
from flowkit.inspect.show import metrics_table


def report_end(result: Any) -> None:
    for notice in result.info.get("notices") or ():
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
    console.print(f"run folder: {result.run_dir}")
    if c["failed"]:
        from flowkit.inspect.trace_view import show_sections  # reads the traces: only now

        errors = show_sections(result.run_dir, result.info, {}).errors
        if errors is not None:
            err_console.print(errors)
    hints = []
    if c["failed"] or c["bad_input"]:
        hints.append(f"see the failed rows: flowkit trace {result.run_id} --failed")
    if c.get("invalid"):
        hints.append(f"see unreadable judge answers: flowkit show {result.run_id}")
    if c["failed"]:
        hints.append(f"once the cause is fixed: flowkit run --resume {result.run_id}")
    for hint in hints:
        err_console.print(f"hint: {hint}", highlight=False)


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
        err_console.print(f"  … and {more} more: flowkit trace {result.run_id} --failed")
