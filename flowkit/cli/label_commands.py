"""The commands about people's labels: agree (judge vs people) and review (the labelling page).

They read run folders and labels files; `flowkit.cli.group` loads them when named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from flowkit.cli.terminal import console, err_console
from flowkit.errors import UsageError

if TYPE_CHECKING:
    from flowkit.inspect.gates import Gate

_NAMES = {
    "n": "rows labelled",
    "accuracy": "exact agreement",
    "kappa": "Cohen's kappa",
    "tpr": "true-positive rate",
    "tnr": "true-negative rate",
    "weighted_kappa": "quadratic weighted kappa",
    "spearman": "Spearman",
    "kendall": "Kendall tau-b",
    "mae": "mean absolute error",
    "alpha": "Krippendorff's alpha (people)",
    "judge_mean": "judge only",
    "human_mean": "labels only",
    "corrected_mean": "corrected (PPI++)",
    "judge_pass_rate": "pass rate, judge only",
    "human_pass_rate": "pass rate, labels only",
    "corrected_pass_rate": "pass rate, corrected",
}
_CI = {
    "judge_mean": "judge_ci",
    "human_mean": "human_ci",
    "corrected_mean": "ci",
    "corrected_pass_rate": "pass_rate_ci",
}


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _print(report: dict[str, Any]) -> None:
    from rich.table import Table

    for name, figures in report.get("outputs", {}).items():
        table = Table(
            title=f"{name} ({figures.get('scale', 'no labels')}, metric {figures['metric']})",
            title_justify="left",
        )
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_column("95% interval")
        for key, label in _NAMES.items():
            if key not in figures:
                continue
            ci = figures.get(_CI.get(key, f"{key}_ci"))
            shown = f"[{_number(ci[0])}, {_number(ci[1])}]" if ci else ""
            table.add_row(label, _number(figures[key]), shown)
        probe = figures.get("length_bias")
        if probe:
            flag = "  BIASED" if probe["flagged"] else ""
            lo, hi = probe["ci"]
            table.add_row(
                "judge score per 100 tokens at equal label",
                _number(probe["per_100_tokens"]),
                f"[{_number(lo)}, {_number(hi)}]{flag}",
            )
        console.print(table)
        confusion = figures.get("confusion")
        if confusion:
            grid = Table(title="confusion: people (rows) x judge (columns)", title_justify="left")
            grid.add_column("")
            for level in confusion["levels"]:
                grid.add_column(_number(level), justify="right")
            for level, counts in zip(confusion["levels"], confusion["matrix"], strict=True):
                grid.add_row(_number(level), *(str(c) for c in counts))
            console.print(grid)
    if "position_swap" in report:
        _print_swap(report["position_swap"])


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--labels",
    "labels_file",
    type=click.Path(dir_okay=False),
    help="JSONL of people's labels (or the data file with human_<output> columns) "
    "[default: RUN/labels.jsonl, what `flowkit review` writes].",
)
@click.option("--key", help="Column matching labels to rows [default: request_id, id or line].")
@click.option(
    "--swapped",
    metavar="RUN2",
    help="Position-swap probe: RUN2 is RUN's pairwise judge with the two answers swapped.",
)
@click.option("--verdict", metavar="NAME", help="With --swapped: the output holding A/B/tie.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def agree(
    run_ref: str,
    labels_file: str | None,
    key: str | None,
    swapped: str | None,
    verdict: str | None,
    as_json: bool,
    runs_dir: str,
) -> None:
    """How far the run's judges agree with people, and the metrics corrected for their error."""
    from flowkit.labels.read import read_labels
    from flowkit.labels.store import RUN_LABELS
    from flowkit.labels.summary import agree as agreement
    from flowkit.runs.folder import resolve_run_dir

    run_dir = resolve_run_dir(run_ref, Path(runs_dir))
    path = Path(labels_file) if labels_file else run_dir / RUN_LABELS
    report: dict[str, Any] = {}
    if labels_file or path.is_file() or not swapped:
        if not path.is_file() and not labels_file:
            raise UsageError(
                f"run {run_dir.name!r} has no labels yet",
                hint="pass --labels FILE, or label rows with `flowkit review RUN`",
            )
        labels = read_labels(path, run_dir, key or (None if labels_file else "line"))
        report = agreement(labels)
        note = labels.unmatched_note()
        if note:
            err_console.print(f"warning: {note}", highlight=False)
        if not labels.outputs and not labels.unmatched:
            raise UsageError(
                f"{path} holds no labels",
                hint="a label is a JSON line with a key and a value per labelled output, "
                'e.g. {"id": "q1", "score": 4}',
            )
    if swapped:
        from flowkit.labels.bias import swap_probe

        report["position_swap"] = swap_probe(
            run_dir, resolve_run_dir(swapped, Path(runs_dir)), verdict
        )
    if as_json:
        click.echo(json.dumps(report, indent=2, allow_nan=False, default=str))
    else:
        _print(report)


@click.command()
@click.argument("run_ref", metavar="RUN")
@click.option(
    "--output", "output", metavar="NAME", help="The output to label [default: score/result]."
)
@click.option(
    "--draw",
    type=click.Choice(["random", "score", "disagreement"]),
    default="random",
    show_default=True,
    help="Row order: a uniform sample (what corrected figures assume), round-robin over the "
    "judge's scores, or where the run's judges disagree most first.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the draw.")
@click.option("--width", type=float, help="Label budget: the corrected interval width wanted.")
@click.option(
    "--hide-judge", is_flag=True, help="Hide the judges' figures until a row is labelled."
)
@click.option("--annotator", help="Your name in labels.jsonl [default: $USER].")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=0, show_default=True, help="Port (0: any free one).")
@click.option("--token", help="The URL's token [default: a new random one].")
@click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False))
def review(
    run_ref: str,
    output: str | None,
    draw: str,
    seed: int,
    width: float | None,
    hide_judge: bool,
    annotator: str | None,
    host: str,
    port: int,
    token: str | None,
    runs_dir: str,
) -> None:
    """Label RUN's rows in the browser; every label goes to RUN/labels.jsonl at once."""
    import asyncio
    import contextlib
    import os

    from flowkit.review.rows import open_review
    from flowkit.review.server import new_token, serve
    from flowkit.runs.folder import resolve_run_dir

    who = annotator or os.environ.get("USER") or "reviewer"
    run_dir = resolve_run_dir(run_ref, Path(runs_dir))
    session = open_review(run_dir, output, draw, seed, width, hide_judge, who)

    def announce(url: str) -> None:
        click.echo(f"review {run_dir.name} ({session.output}, {len(session.order)} rows): {url}")
        click.echo("labels go to " + str(session.labels_path) + "; Ctrl-C to stop")

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a review ends
        asyncio.run(serve(session, host, port, token or new_token(), announce))


def _print_swap(probe: dict[str, Any]) -> None:
    flag = "  BIASED" if probe["flagged"] else ""
    console.print(
        f"position swap ({probe['verdict']}, {probe['n']} rows): verdicts follow the answer in "
        f"{_number(probe['consistent'])} [{_number(probe['consistent_ci'][0])}, "
        f"{_number(probe['consistent_ci'][1])}]; the first position wins "
        f"{_number(probe['first_wins'])} [{_number(probe['first_wins_ci'][0])}, "
        f"{_number(probe['first_wins_ci'][1])}]{flag}",
        highlight=False,
    )


def check_labels(
    labels_file: str | None, key: str | None, gates: list[Gate], resume_run: str | None = None
) -> None:
    """`run --labels` is read after the rows run: refuse what cannot work before the first.
    A resumed run that has labels of its own (RUN/labels.jsonl) is corrected by them."""
    if labels_file is None:
        if key is not None:
            raise UsageError("--key goes with --labels FILE")
        if resume_run is not None:
            from flowkit.labels.store import RUN_LABELS
            from flowkit.runs.folder import resolve_run_dir

            if (resolve_run_dir(resume_run) / RUN_LABELS).is_file():
                return
        if not gates:
            return  # the labels' reader (and the scores it reads) load only for a gate
        from flowkit.labels.read import GATED

        for gate in gates:
            if gate.metric.endswith(GATED):
                raise UsageError(f"--gate {gate}: {gate.metric!r} needs --labels FILE")
    elif not Path(labels_file).is_file():
        raise UsageError(f"no labels file {labels_file!r}")


def add_labels(run_dir: Path, labels_file: str, key: str | None) -> dict[str, Any]:
    """After `run --labels`: the corrected figures, added to metrics.json and returned."""
    from flowkit.labels.summary import add_to_metrics

    added, note = add_to_metrics(run_dir, Path(labels_file), key)
    if not added and not note:
        err_console.print(
            f"warning: {labels_file} gives no corrected figure (it needs two labelled rows)",
            highlight=False,
        )
    for name, value in added.items():
        if name.endswith(".corrected"):
            lo, hi = added[f"{name}_ci"]
            console.print(f"{name} {_number(value)} [{_number(lo)}, {_number(hi)}]")
    if note:
        err_console.print(f"warning: {note}", highlight=False)
    return added


def corrected_differences(run_a: Path, run_b: Path) -> list[dict[str, Any]]:
    """compare's corrected (PPI++) differences; empty unless both runs have labels."""
    from flowkit.labels.store import RUN_LABELS

    if not ((run_a / RUN_LABELS).is_file() and (run_b / RUN_LABELS).is_file()):
        return []
    from flowkit.labels.compare import corrected_differences as differences

    return differences(run_a, run_b)


def with_corrected(text: str, corrected: list[dict[str, Any]]) -> str:
    """compare's JSON, with a "corrected" list when both runs have labels."""
    if not corrected:
        return text
    return json.dumps({**json.loads(text), "corrected": corrected}, indent=2)


def print_corrected(corrected: list[dict[str, Any]]) -> None:
    from rich.table import Table

    if not corrected:
        return
    table = Table(title="corrected by people's labels (PPI++), B - A", title_justify="left")
    for column in ("metric", "delta", "95% interval", "labels"):
        table.add_column(column)
    for row in corrected:
        lo, hi = row["ci"]
        how = (
            f"{row['shared']} rows labelled in both" if row["how"] == "paired" else "each run's own"
        )
        table.add_row(row["metric"], _number(row["delta"]), f"[{_number(lo)}, {_number(hi)}]", how)
    console.print(table)


COMMANDS = [agree, review]
