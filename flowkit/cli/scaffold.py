"""`flowkit init DIR`: a working custom metric to start from, outside the flowkit repository.

It holds a flow with a python node (``source:`` beside the flow) and an llm judge whose reply
the built-in parse node reads (``use: flowkit:parse_score``), two aggregates whose metric keys
differ (a built-in one for the judge's scores, one of the project's that declares its keys with
``@returns_keys``), the judge's prompt, sample data and a ``flowkit.yaml``. Existing files are
never overwritten.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from flowkit.errors import UsageError

FLOW = """\
# A custom metric: is the answer supported by the context? A python node measures word
# overlap; an llm judge scores support from 1 to 5; the built-in parse node reads its reply.
# Metrics are named supported.<key>: summary writes mean, pass_rate, ... for the judge's
# scores, and overlap_summary writes overlap_mean and overlap_min. Two aggregates may not write
# the same key (`flowkit validate` refuses it), so a function of your own declares its keys.
name: supported
description: Is the answer supported by the context? Judge score 1-5, plus word overlap 0-1.
inputs:
  context: {type: string, description: The text the answer should rest on.}
  answer: {type: string, description: The app's answer.}
  threshold: {type: number, default: 3, description: A row passes when its score beats this.}
outputs:
  score: ${parse.output.score}
  result: ${parse.output.result}
  overlap: ${overlap.output}
nodes:
  - name: overlap
    type: python
    source: metrics.py            # beside this flow
    function: word_overlap
    inputs: {answer: ${inputs.answer}, context: ${inputs.context}}
  - name: judge
    type: llm
    prompt: prompts/supported.jinja2
    params: {temperature: 0, max_tokens: 200}
    inputs: {context: ${inputs.context}, answer: ${inputs.answer}}
  - name: parse
    use: flowkit:parse_score       # the built-in node, from any project
    inputs: {text: ${judge.output}, min: 1, max: 5, threshold: ${inputs.threshold}}
  - name: summary
    type: aggregate
    function: flowkit.metrics.aggregate:score_summary
    inputs: {scores: ${parse.output.score}, threshold: ${inputs.threshold}}
  - name: overlap_summary
    type: aggregate
    source: metrics.py
    function: overlap_summary
    inputs: {values: ${overlap.output}}
"""

METRICS = '''\
"""Python nodes for the `supported` flow: plain functions, called with the node's inputs."""

from __future__ import annotations

import re

from flowkit.metrics.keys import returns_keys


def word_overlap(answer: str, context: str) -> float:
    """The share of the answer's words that the context contains (0 to 1)."""
    words = set(re.findall(r"\\w+", answer.lower()))
    if not words:
        return 0.0
    return len(words & set(re.findall(r"\\w+", context.lower()))) / len(words)


@returns_keys(["overlap_mean", "overlap_min"])
def overlap_summary(values: list[float]) -> dict[str, float | None]:
    """An aggregate: it gets every row's overlap as one list. The keys it returns are declared,
    so `flowkit validate` can check that no other aggregate writes them and that a --gate
    names one of them."""
    if not values:
        return {"overlap_mean": None, "overlap_min": None}
    return {"overlap_mean": sum(values) / len(values), "overlap_min": min(values)}
'''

PROMPT = """\
system:
You check whether an ANSWER is supported by a CONTEXT. Every claim in a supported answer can be
found in the context. Use this scale: 5 - fully supported; 4 - mostly; 3 - partly; 2 - barely;
1 - not supported or contradicted. Write one sentence on why, then end with a last line of the
form "Score: N", where N is an integer from 1 to 5.
user:
CONTEXT:
{{ context }}

ANSWER:
{{ answer }}
"""

_ROWS = [
    {
        "context": "The Eiffel Tower is 330 metres tall and was completed in 1889.",
        "answer": "It was completed in 1889 and is 330 metres tall.",
    },
    {"context": "Mount Everest is 8,849 metres high.", "answer": "Everest is 8,849 metres high."},
    {
        "context": "The Nile flows north into the Mediterranean Sea.",
        "answer": "Bananas grow in tropical climates.",
    },
]
DATA = "".join(json.dumps(row) + "\n" for row in _ROWS)

CONFIG = """\
# Model settings for this project. The endpoint and key come from OPENAI_BASE_URL and
# OPENAI_API_KEY (or add a connection here; see flowkit's docs/model-endpoints.md).
default_model: gpt-4o-mini
"""

FILES = {
    "supported.yaml": FLOW,
    "metrics.py": METRICS,
    "prompts/supported.jinja2": PROMPT,
    "data.jsonl": DATA,
    "flowkit.yaml": CONFIG,
}


def scaffold(directory: Path) -> list[Path]:
    """Write the example project into ``directory``; refuse to overwrite anything.

    Everything is checked before anything is written: a file, a link (even a dangling one) or
    anything else where a file or folder of the project goes is refused, and nothing is
    written. Each file is then created afresh (``O_EXCL | O_NOFOLLOW``), so a link planted
    meanwhile is refused rather than written through."""
    problems = _in_the_way(directory)
    if problems:
        raise UsageError(
            f"{directory} already has {', '.join(problems)}; nothing was written",
            hint="choose a new or empty folder",
        )
    written = []
    for name, text in FILES.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


def _in_the_way(directory: Path) -> list[str]:
    """What stands where the project's files and folders go: any entry at a file's place
    (``lexists``: a dangling link counts), anything but a real folder at a folder's place."""
    if os.path.lexists(directory) and (directory.is_symlink() or not directory.is_dir()):
        return [f"{directory} (not a folder)"]
    problems: list[str] = []
    folders: dict[str, None] = {}
    for name in FILES:
        parts = Path(name).parts
        for i in range(1, len(parts)):
            folders[str(Path(*parts[:i]))] = None
    for name in folders:
        path = directory / name
        if os.path.lexists(path) and (path.is_symlink() or not path.is_dir()):
            problems.append(f"{name} (not a folder)")
    for name in FILES:
        path = directory / name
        if os.path.lexists(path):
            problems.append(f"{name} (a link)" if path.is_symlink() else name)
    return problems
