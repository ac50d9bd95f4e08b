"""`flowkit run DIR --variant '${node.variant_1}'` (as `pf run create --variant`) and
`--variants all`: every variant of each node that uses variants, each as its own run folder,
then their metrics side by side (the folders are ordinary runs: `flowkit compare A B` reads
any two of them, and the report each one)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from flowkit.errors import UsageError, did_you_mean, one_of
from flowkit.flow.source import YamlSyntaxError, read_yaml
from flowkit.flow.variants import CHOSEN, Choice, declared
from flowkit.pfcompat.variants import check_choice, parse_choice, tuned_nodes, variant_ids


def _flow_file(flows: list[str]) -> tuple[Path, dict[str, Any]]:
    """The one flow file the command runs, read plainly (the loader reports its faults)."""
    paths = [Path(f) for f in flows]
    files = [p / "flow.dag.yaml" if p.is_dir() else p for p in paths]
    if len(files) != 1 or not files[0].is_file():
        raise UsageError(
            "--variant and --variants take one flow: a Prompt Flow folder with node_variants, "
            "or a flow file whose llm nodes declare variants"
        )
    try:  # flowkit's reading (`{x: ${inputs.x}}` is a reference, not a nested mapping)
        raw = read_yaml(files[0], str(files[0]))
    except (OSError, YamlSyntaxError, UnicodeDecodeError) as err:
        raise UsageError(f"cannot read {files[0]}: {err}") from None
    return files[0], raw if isinstance(raw, dict) else {}


def _declared(file: Path, raw: dict[str, Any]) -> dict[str, list[str]]:
    """Per node, the variant ids it can run: Prompt Flow's node_variants, or a native node's
    `variants:` (its `default` first)."""
    if file.name == "flow.dag.yaml":
        return {n: variant_ids(raw, n) for n in tuned_nodes(raw)}
    return declared(raw)


def choose(flows: list[str], text: str) -> Choice:
    """Check `--variant` against the flow and make it the variant this command's loads take."""
    choice = parse_choice(text)
    file, raw = _flow_file(flows)
    if file.name == "flow.dag.yaml":
        check_choice(raw, choice)
    else:
        ids = _declared(file, raw).get(choice.node)
        if ids is None or choice.variant not in ids:
            what = (
                f"node {choice.node!r} declares no variants"
                if ids is None
                else f"variant {choice.variant!r} not found for node {choice.node!r}"
                f"{did_you_mean(choice.variant, ids)} (variants: {one_of(ids)})"
            )
            raise UsageError(f"--variant {choice}: {what}")
    CHOSEN.set(choice)  # this command's context: every load of the flow in this run takes it
    return choice


def every_variant(flows: list[str]) -> list[Choice]:
    file, raw = _flow_file(flows)
    choices = [Choice(n, v) for n, ids in _declared(file, raw).items() for v in ids]
    if not choices:
        raise UsageError(f"--variants all: no node of {file} has variants")
    return choices


def run_every_variant(ctx: click.Context, flows: list[str], name: str | None) -> None:
    """Invoke this same `flowkit run` once per variant, each as its own named run, then print
    their metrics side by side."""
    if ctx.params.get("output"):
        raise UsageError("--variants all writes a run folder per variant: use --name, not --output")
    choices = every_variant(flows)
    folder = Path(flows[0])
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = name or f"{(folder if folder.is_dir() else folder.parent).name}-{stamp}"
    runs_root = Path("runs")  # where `flowkit run --name` puts its folder
    done: list[tuple[Choice, Path, int]] = []
    for choice in choices:
        run_name = f"{base}-{choice.node}-{choice.variant}"
        params = {**ctx.params, "variant": str(choice), "all_variants": None, "name": run_name}
        code = 0
        try:
            ctx.invoke(ctx.command, **params)
        except SystemExit as exit_:  # a gate or --fail-on-error: the other variants still run
            code = int(exit_.code or 0)
        done.append((choice, runs_root / run_name, code))
    from flowkit.cli.terminal import console

    console.print(side_by_side(done))
    runs = " ".join(str(path) for _, path, _ in done[:2])
    console.print(f"compare two of them: flowkit compare {runs}", highlight=False)
    if any(code for _, _, code in done):
        raise SystemExit(max(code for _, _, code in done))


def side_by_side(done: list[tuple[Choice, Path, int]]) -> Table:
    """One row per metric, one column per variant run."""
    metrics: list[dict[str, Any]] = []
    for _, path, _ in done:
        file = path / "metrics.json"
        data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        metrics.append(data.get("metrics", data) if isinstance(data, dict) else {})
    table = Table(title="variants")
    table.add_column("metric")
    for choice, path, _ in done:
        table.add_column(f"{choice}\n{path.name}")
    names = sorted(
        {k for m in metrics for k in m if "." not in k} or {k for m in metrics for k in m}
    )
    for key in names:
        table.add_row(key, *(_shown(m.get(key)) for m in metrics))
    return table


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
