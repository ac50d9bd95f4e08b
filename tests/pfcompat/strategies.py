"""A Hypothesis strategy that writes Prompt Flow DAG folders from the features Prompt Flow
documents, and the rows to run them with.

A flow draws: inputs of each type, with and without defaults (rows then sometimes leave them
out); python tools, sync or async, with defaults, returning a scalar, a dict or a list; llm and
prompt nodes whose prompts use every role-marker form (`system:`, `# System:`, spaces around,
empty sections, a `function` turn with `name:`), `${inputs.x}` and node outputs as variables and
a variable no input gives; `activate` on an input or a node output, true or false; an aggregation
node that logs metrics; flow outputs that read `output`, `outputs.x`, `output.x` and inputs; and
the top-level keys published flows carry (`id`, `$schema`, `environment`, `language`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "tau"]
TYPES = ["string", "int", "double", "bool", "list", "object"]
MARKERS = ["{role}:", "# {role}:", "# {Role}:", "  {role}  :  ", "#{role}:", "{ROLE}:"]
MODEL = "gpt-4o-mini"


@dataclass
class Generated:
    """A flow folder's files and the rows to run it with."""

    files: dict[str, str]
    rows: list[dict[str, Any]]
    features: set[str] = field(default_factory=set)

    def write(self, folder: Path) -> Path:
        for name, text in self.files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        return folder


def _value(draw: st.DrawFn, kind: str) -> Any:
    if kind == "string":
        return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
    if kind == "int":
        return draw(st.integers(-20, 99))
    if kind == "double":
        return draw(st.integers(-400, 400)) / 8  # exact in binary: no rounding differences
    if kind == "bool":
        return draw(st.booleans())
    if kind == "list":
        return draw(st.lists(st.sampled_from(WORDS), max_size=3))
    return draw(st.dictionaries(st.sampled_from(["k", "n"]), st.integers(0, 9), max_size=2))


@dataclass
class _Node:
    name: str
    returns: str  # "scalar", "dict", "list" or "text"
    spec: dict[str, Any]


_PY_BODIES = {
    "scalar": "    return f'{{{a}}}|{{{b}}}'\n",
    "dict": "    return {{'v': str({a}), 'n': len(str({b}))}}\n",
    "list": "    return [str({a}), str({b})]\n",
}


def _python(draw: st.DrawFn, i: int, refs: list[str], files: dict[str, str], feats: set) -> _Node:
    returns = draw(st.sampled_from(["scalar", "dict", "list"]))
    is_async = draw(st.booleans())
    with_default = draw(st.booleans())
    params = "a, b='fixed'" if with_default else "a, b"
    inputs: dict[str, Any] = {"a": draw(st.sampled_from(refs))}
    if not with_default or draw(st.booleans()):
        inputs["b"] = draw(st.sampled_from([*refs, "literal"]))
    body = _PY_BODIES[returns].format(a="a", b="b")
    head = "async def" if is_async else "def"
    files[f"tool_{i}.py"] = (
        f"from promptflow.core import tool\n\n\n@tool\n{head} run_{i}({params}):\n{body}"
    )
    feats |= {f"python-{returns}", "python-async" if is_async else "python-sync"}
    if with_default and "b" not in inputs:
        feats.add("python-default")
    spec = {"name": f"n{i}", "type": "python", "source": {"type": "code", "path": f"tool_{i}.py"}}
    spec["inputs"] = inputs
    return _Node(f"n{i}", returns, spec)


def _marker(draw: st.DrawFn, role: str, feats: set) -> str:
    form = draw(st.sampled_from(MARKERS))
    feats.add(f"marker {form!r}")
    return form.format(role=role, Role=role.capitalize(), ROLE=role.upper())


def _prompt_text(draw: st.DrawFn, names: list[str], chat: bool, feats: set) -> str:
    """A template over ``names``; for chat, split into turns by drawn role markers."""
    used = [f"{{{{ {n} }}}}" for n in names]
    if draw(st.booleans()):
        used.append("{{ unused_variable }}")
        feats.add("unused-variable")
    if not chat:
        return "Say: " + " and ".join(used) + "\n"
    parts = []
    if draw(st.booleans()):
        parts.append(_marker(draw, "system", feats) + "\nYou are terse. " + used[0] + "\n")
    parts.append(_marker(draw, "user", feats) + "\n" + " / ".join(used) + "\n")
    for role in draw(st.lists(st.sampled_from(["assistant", "user"]), max_size=3)):
        if draw(st.booleans()):
            parts.append(_marker(draw, role, feats) + "\n\n")  # an empty turn
            feats.add(f"empty-{role}")
        else:
            parts.append(_marker(draw, role, feats) + "\n" + draw(st.sampled_from(WORDS)) + "\n")
    if draw(st.integers(0, 5)) == 0:
        parts.append("function:\nname:\nlookup\ncontent:\n" + used[-1] + "\n")
        feats.add("function-turn")
    # The last turn the model answers: a user turn with the text the judge replies to.
    parts.append(_marker(draw, "user", feats) + "\nReply to " + used[0] + "\n")
    return "".join(parts)


def _llm(
    draw: st.DrawFn, i: int, refs: list[str], files: dict[str, str], feats: set, chat: bool
) -> _Node:
    count = draw(st.integers(1, 2))
    names = [f"v{j}" for j in range(count)]
    inputs: dict[str, Any] = {n: draw(st.sampled_from(refs)) for n in names}
    path = f"prompt_{i}.jinja2"
    files[path] = _prompt_text(draw, names, chat, feats)
    spec: dict[str, Any] = {"name": f"n{i}", "source": {"type": "code", "path": path}}
    if chat:
        spec |= {"type": "llm", "connection": "open_ai", "api": "chat"}
        params: dict[str, Any] = {"model": MODEL}
        if draw(st.booleans()):
            params["temperature"] = draw(st.sampled_from([0, 0.5, 1]))
        if draw(st.booleans()):
            params["max_tokens"] = draw(st.integers(5, 60))
        inputs = {**params, **inputs}
        feats.add("llm")
    else:
        spec["type"] = "prompt"
        feats.add("prompt")
    spec["inputs"] = inputs
    return _Node(f"n{i}", "text", spec)


@st.composite
def pf_flows(draw: st.DrawFn) -> Generated:
    feats: set[str] = set()
    files: dict[str, str] = {}
    inputs: dict[str, dict[str, Any]] = {"q": {"type": "string"}}
    kinds = {"q": "string"}
    for j in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(TYPES))
        spec: dict[str, Any] = {"type": kind}
        if draw(st.booleans()):
            spec["default"] = _value(draw, kind)
            feats.add(f"input-{kind}-default")
        feats.add(f"input-{kind}")
        inputs[f"x{j}"] = spec
        kinds[f"x{j}"] = kind
    refs = [f"${{inputs.{n}}}" for n in inputs]
    nodes: list[_Node] = []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["python", "python", "llm", "prompt"]))
        if kind == "python":
            node = _python(draw, i, refs, files, feats)
        else:
            node = _llm(draw, i, refs, files, feats, chat=kind == "llm")
        if nodes and draw(st.integers(0, 3)) == 0:
            node.spec["activate"] = _activate(draw, nodes, kinds, feats)
        nodes.append(node)
        refs = [*refs, f"${{n{i}.output}}"]
        if node.returns == "dict":
            refs.append(f"${{n{i}.output.v}}")
    specs = [n.spec for n in nodes]
    outputs: dict[str, Any] = {}
    for node in nodes:
        ref = f"${{{node.name}.output}}"
        if node.returns == "dict":
            ref = draw(
                st.sampled_from([ref, f"${{{node.name}.output.v}}", f"${{{node.name}.outputs.n}}"])
            )
            feats.add("output-" + ref.split(".")[1].rstrip("}"))
        outputs[f"o_{node.name}"] = {"type": "string", "reference": ref}
    if draw(st.booleans()):
        outputs["echo"] = {
            "type": "string",
            "reference": draw(st.sampled_from(refs[: len(inputs)])),
        }
        feats.add("output-input")
    if draw(st.booleans()):
        specs.append(_aggregation(draw, nodes, files, feats))
    flow: dict[str, Any] = {}
    if draw(st.booleans()):
        flow["id"] = "generated_flow"
        feats.add("top-id")
    if draw(st.booleans()):
        flow["$schema"] = "https://azuremlschemas.azureedge.net/promptflow/latest/Flow.schema.json"
    if draw(st.booleans()):
        flow["environment"] = {"python_requirements_txt": "requirements.txt"}
        files["requirements.txt"] = "promptflow\npromptflow-tools\npyyaml\n"
        feats.add("environment")
    flow |= {"inputs": inputs, "outputs": outputs, "nodes": specs}
    files["flow.dag.yaml"] = yaml.safe_dump(flow, sort_keys=False)
    rows = []
    for r in range(draw(st.integers(1, 3))):
        row: dict[str, Any] = {"q": f"row {r} " + draw(st.sampled_from(WORDS))}
        for name, spec in inputs.items():
            if name != "q" and ("default" not in spec or draw(st.booleans())):
                row[name] = _value(draw, spec["type"])
        rows.append(row)
    return Generated(files, json.loads(json.dumps(rows)), feats)


def _activate(
    draw: st.DrawFn, earlier: list[_Node], kinds: dict[str, str], feats: set
) -> dict[str, Any]:
    bools = [n for n, k in kinds.items() if k == "bool"]
    if bools and draw(st.booleans()):
        feats.add("activate-input")
        return {"when": f"${{inputs.{draw(st.sampled_from(bools))}}}", "is": draw(st.booleans())}
    node = draw(st.sampled_from(earlier))
    feats.add("activate-node")
    if node.returns == "dict":
        return {"when": f"${{{node.name}.output.n}}", "is": draw(st.integers(1, 12))}
    return {"when": f"${{{node.name}.output}}", "is": draw(st.sampled_from(["alpha", "never"]))}


def _aggregation(draw: st.DrawFn, nodes: list[_Node], files: dict[str, str], feats: set) -> dict:
    node = draw(st.sampled_from(nodes))
    files["aggregate.py"] = (
        "from promptflow.core import log_metric, tool\n\n\n@tool\n"
        "def aggregate(values: list, labels: list):\n"
        "    log_metric('rows', len(values))\n"
        "    log_metric(key='distinct', value=len({str(v) for v in values}))\n"
        "    log_metric('labelled', sum(1 for x in labels if x))\n"
        "    return len(values)\n"
    )
    feats.add("aggregation")
    return {
        "name": "aggregate",
        "type": "python",
        "source": {"type": "code", "path": "aggregate.py"},
        "inputs": {"values": f"${{{node.name}.output}}", "labels": "${inputs.q}"},
        "aggregation": True,
    }
