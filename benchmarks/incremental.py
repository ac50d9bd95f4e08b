"""Benchmark 4 (incremental): what a rerun costs after one prompt of a three-node llm flow changes.

    python benchmarks/incremental.py [--rows 500]

The flow (written to a temporary folder with its own prompts) chains three llm nodes:
`answer` → `critique` (reads answer) → `verdict` (reads critique). It runs once (rows × 3 model
calls), again unchanged (0 calls: every node is a cache hit), and again after the prompt of
`verdict` — the last node, which no llm node reads — is edited. Each node reads the row's
question, so no two rows share a prompt (the cache would otherwise answer the second from the
first). The rule: a rerun makes rows × (the llm nodes at or downstream of the edited one) calls,
which for the last node is rows × 1. Calls are counted by the local test server (run in a child
process). Prints the calls of each run, and last the edited rerun's calls against the target.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
from pathlib import Path

import flowkit
from flowkit.llm import load_settings
from flowkit.testing.server import ServerConfig, serve_subprocess

FLOW = """
name: incremental
inputs:
  question: {type: string}
outputs:
  verdict: ${verdict.output}
nodes:
  - name: answer
    type: llm
    prompt: answer.jinja2
    inputs: {question: ${inputs.question}}
  - name: critique
    type: llm
    prompt: critique.jinja2
    inputs: {question: ${inputs.question}, answer: ${answer.output}}
  - name: verdict
    type: llm
    prompt: verdict.jinja2
    inputs: {question: ${inputs.question}, critique: ${critique.output}}
"""

PROMPTS = {
    "answer.jinja2": "system:\nAnswer briefly.\nuser:\n{{ question }}\n",
    "critique.jinja2": "user:\nQuestion: {{ question }}\nAnswer: {{ answer }}\nCritique it.\n",
    "verdict.jinja2": "user:\nQuestion: {{ question }}\nIs that acceptable?\n{{ critique }}\n",
}
EDITED = "verdict.jinja2"
EDIT = "Reply YES or NO only.\n"


def write_project(root: Path, base_url: str, rows: int) -> None:
    (root / "flow.yaml").write_text(textwrap.dedent(FLOW).lstrip())
    for name, text in PROMPTS.items():
        (root / name).write_text(text)
    (root / "flowkit.yaml").write_text(
        f"default_model: flowkit-test\nconnections:\n  local: {{base_url: '{base_url}'}}\n"
    )
    with open(root / "rows.jsonl", "w") as f:
        for i in range(rows):
            f.write(json.dumps({"question": f"What is fact number {i}?"}) + "\n")


def calls_of_run(root: Path, srv: object, name: str) -> int:
    """Run the flow once (same cache every time); return the model calls it made."""
    srv.reset()  # type: ignore[attr-defined]
    result = flowkit.run(
        root / "flow.yaml",
        root / "rows.jsonl",
        settings=load_settings(root, env={}),
        cache_dir=root / "cache",
        concurrency=32,
        output=root / name,
    )
    assert result.counts["failed"] == 0, result.counts
    return int(srv.stats()["chat_completions"])  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    args = parser.parse_args()
    rows = args.rows
    with tempfile.TemporaryDirectory() as tmp, serve_subprocess(ServerConfig()) as srv:
        root = Path(tmp)
        write_project(root, srv.base_url, rows)
        first = calls_of_run(root, srv, "first")
        print(f"first run: {first} calls (rows × 3 = {rows * 3})", flush=True)
        again = calls_of_run(root, srv, "again")
        print(f"unchanged rerun: {again} calls (expected 0)", flush=True)
        prompt = root / EDITED
        prompt.write_text(prompt.read_text() + EDIT)
        edited = calls_of_run(root, srv, "edited")
    assert first == rows * 3 and again == 0, (first, again)
    verdict = "met" if edited == rows else "MISSED"
    print(
        f"incremental: rerun after editing the last node's prompt made {edited} LLM calls; "
        f"target rows × 1 = {rows} ({verdict})",
        flush=True,
    )
    assert edited == rows, (edited, rows)


if __name__ == "__main__":
    main()
