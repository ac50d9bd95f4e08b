"""`flow.dag.yaml` → a flowkit flow mapping, line numbers kept, for the ordinary loader.

What maps to what (README, "Coming from Prompt Flow"):

- the flow's name is its folder's; `name:` becomes the description;
- inputs `string|int|double|bool|list|object` → `text|integer|number|boolean|list|json`
  (`text` takes any value as its string, `json` any value, decoding JSON strings, as Prompt
  Flow's `object` does);
- outputs `{type, reference}` → the reference (outputs of aggregation nodes are dropped);
- python nodes → `python` nodes calling the file's one `@tool` function; `aggregation: true` →
  `aggregate` nodes whose metrics are those logged with `log_metric`;
- llm nodes → `llm` nodes: request parameters split from template variables, reply as text,
  `# role:` markers, `deployment_name` as the model used when flowkit's configuration names none;
- prompt nodes → a python node rendering the template (`flowkit.flow.templates:render_text`);
- the embedding package tool → an `embedding` node;
- `activate: {when, is}` → `when: {ref, equals}`; every node gets `upstream_skipped: propagate`;
- a node with `use_variants: true` → its chosen (or default) variant's node (``variants``).

Keys Prompt Flow ignores are ignored with a note (``rules``); other package tools and node types
are validation errors at their line that name the feature.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.errors import did_you_mean, display
from flowkit.flow.refs import RefSyntaxError, parse_flow_ref
from flowkit.flow.source import YamlSyntaxError, YDict, YList, line_of, read_yaml
from flowkit.kinds.llm import PARAM_INPUT
from flowkit.pfcompat import variants
from flowkit.pfcompat.includes import Includes
from flowkit.pfcompat.rules import (
    FLOW_KEYS,
    NODE_KEYS,
    aggregation,
    input_ref,
    missing_requirements,
    output_ref,
)
from flowkit.pfcompat.toolscan import ToolInfo, find_tool
from flowkit.pfcompat.values import (
    CHAT_PARAM_TYPES,
    DROPPED_PARAMS,
    MODEL_BY_REF,
    MODEL_PARAMS,
    REQUEST_PARAMS,
    is_ref,
    literal_input,
)
from flowkit.pfcompat.variants import tuned_nodes

if TYPE_CHECKING:
    from flowkit.flow.loader import LoadContext

INPUT_TYPES = {
    "string": "text",
    "int": "integer",
    "double": "number",
    "bool": "boolean",
    "list": "list",
    "object": "json",
}
EMBEDDING_TOOL = "promptflow.tools.embedding.embedding"
SHIM = "flowkit:pfcompat/shim"
"""The shim's folder as a flow's `python_path` names it."""

NOTICES: dict[str, list[str]] = {}
"""Per translated file: what the user should know that is not an error (missing packages)."""


class _Out:
    """Builds YDicts that keep the line of the Prompt Flow key they came from."""

    def __init__(self, file: str) -> None:
        self.file = file

    def map(self, src: Any, items: dict[str, Any], lines: dict[str, Any] | None = None) -> YDict:
        out = YDict(items)
        out.file, out.line = self.file, getattr(src, "line", 0)
        lines = lines or {}
        out.key_lines = {k: line_of(src, lines.get(k, k)) for k in items}
        return out


class _Translation:
    def __init__(self, file: Path, ctx: LoadContext) -> None:
        self.file, self.ctx = file, ctx
        self.shown = display(file)
        self.out = _Out(self.shown)
        self.folder = file.parent
        self.aggregates: set[str] = set()
        self.notices: list[str] = []
        self.picked: dict[str, str] = {}
        """The variant each node that uses variants runs (said in the run's notes)."""
        self.includes = Includes(self.folder, None)

    def error(self, container: Any, key: Any, node: str | None, message: str) -> None:
        self.ctx.report(self.shown, line_of(container, key), node, message)

    def note(self, container: Any, key: Any, node: str | None, message: str) -> None:
        where = f"node {node!r}: " if node else ""
        self.notices.append(f"{self.shown}:{line_of(container, key)}: {where}{message}")

    def ignored(self, container: Any, key: Any, node: str | None, known: set[str]) -> None:
        hint = did_you_mean(str(key), known)
        if key == "variants" and node is not None:
            hint = "; a node's variants go in the flow's node_variants, with use_variants: true"
        self.note(container, key, node, f"key {key!r} is ignored, as Prompt Flow ignores it{hint}")

    # -- the flow ----------------------------------------------------------------------------
    def flow(self, raw: YDict) -> YDict:
        for key in raw:
            if key not in FLOW_KEYS:
                self.ignored(raw, key, None, FLOW_KEYS)
        if raw.get("environment_variables"):
            self.note(
                raw,
                "environment_variables",
                None,
                "environment_variables are not set by flowkit: set them in the shell or with "
                "--environment-variables NAME=VALUE",
            )
        self._requirements(raw.get("environment"))
        self.includes = Includes(self.folder, raw.get("additional_includes"))
        for index, problem in self.includes.problems:
            listed = raw.get("additional_includes")
            where = listed if isinstance(listed, YList) else raw
            self.error(where, index if where is listed else "additional_includes", None, problem)
        raw_nodes = variants.applied(raw, self.error, self.picked)
        self.notices += [f"node {n!r} runs its variant {v!r}" for n, v in self.picked.items()]
        self.ctx.broken.update(n for n in tuned_nodes(raw) if n not in self.picked)
        for n in raw_nodes:
            if isinstance(n, dict) and aggregation(n):
                self.aggregates.add(str(n.get("name")))
        name = re.sub(r"[^A-Za-z0-9_\-]", "_", self.folder.name) or "flow"
        if not re.match(r"[A-Za-z_]", name):
            name = "_" + name
        items: dict[str, Any] = {"name": name}
        if isinstance(raw.get("name"), str) or isinstance(raw.get("description"), str):
            items["description"] = str(raw.get("description") or raw.get("name"))
        items["inputs"] = self.inputs(raw.get("inputs") or {})
        items["outputs"] = self.outputs(raw.get("outputs") or {})
        nodes, lines = YList(), []
        for n, line in zip(raw_nodes, getattr(raw_nodes, "item_lines", []), strict=False):
            start = len(self.ctx.diagnostics)
            out = self.node(n) if isinstance(n, YDict) else None  # read_yaml's every mapping
            if out is None or len(self.ctx.diagnostics) > start:
                # Reported already: left out, so that it raises no second error of its own.
                if isinstance(n, dict) and isinstance(n.get("name"), str):
                    self.ctx.broken.add(n["name"])
                continue
            nodes.append(out)
            lines.append(line)
        nodes.item_lines = lines
        items["nodes"] = nodes
        # The folder, for sibling imports of its code; the shim, for `import promptflow`.
        items["python_path"] = [".", *self.includes.python_path(), SHIM]
        return self.out.map(
            raw, items, {"name": "nodes", "description": "name", "python_path": "nodes"}
        )

    def _requirements(self, env: Any) -> None:
        notice = missing_requirements(self.folder, env)
        if notice:
            self.notices.append(notice)

    def inputs(self, raw: Any) -> YDict:
        out: dict[str, Any] = {}
        for name, spec in raw.items():
            spec = spec if isinstance(spec, dict) else {}
            items: dict[str, Any] = {}
            pf_type = spec.get("type", "string")
            if pf_type not in INPUT_TYPES:
                self.error(
                    spec,
                    "type",
                    None,
                    f"input {name!r}: type {pf_type!r} is not supported "
                    f"(one of {', '.join(INPUT_TYPES)})",
                )
            items["type"] = INPUT_TYPES.get(pf_type, "any")
            if "default" in spec:
                items["default"] = spec["default"]
            if spec.get("description"):
                items["description"] = str(spec["description"])
            out[name] = self.out.map(spec, items)
        return self.out.map(raw, out)

    def outputs(self, raw: Any) -> YDict:
        out: dict[str, Any] = {}
        for name, spec in raw.items():
            ref = output_ref(spec.get("reference") if isinstance(spec, dict) else spec)
            target = str(ref or "")[2:].split(".", 1)[0]
            if target in self.aggregates:
                continue  # as in Prompt Flow: aggregation results are metrics, not row outputs
            out[name] = ref
        return self.out.map(raw, out)

    # -- nodes --------------------------------------------------------------------------------
    def node(self, raw: YDict) -> YDict:
        name = raw.get("name") if isinstance(raw.get("name"), str) else None
        for key in raw:
            if key not in NODE_KEYS:
                self.ignored(raw, key, name, NODE_KEYS)
        kind = raw.get("type")
        given = raw.get("source")
        source = given if isinstance(given, dict) else {}
        given = raw.get("inputs") or {}
        inputs = {k: input_ref(v) for k, v in given.items() if v is not None and v != ""}
        items: dict[str, Any] = {"name": name}
        if kind == "python" and source.get("type") == "package":
            items.update(self.embedding(raw, name, source, inputs))
        elif kind == "python":
            items.update(self.python(raw, name, source, inputs))
        elif kind == "llm":
            items.update(self.llm(raw, name, source, inputs))
        elif kind == "prompt":
            items.update(self.prompt(raw, name, source, inputs))
        else:
            self.error(
                raw,
                "type",
                name,
                f"node type {kind!r} is not supported (python, llm and prompt nodes are)",
            )
            items.update(type="python", function="_unsupported:_", inputs={})
        if isinstance(raw.get("activate"), dict):
            items["when"] = self.activate(raw, name)
        items["upstream_skipped"] = "propagate"
        lines = {"function": "source", "prompt": "source", "when": "activate", "params": "inputs"}
        return self.out.map(raw, items, {**lines, "model_default": "inputs", "model": "inputs"})

    def activate(self, raw: YDict, name: str | None) -> Any:
        act = raw["activate"]
        when = act.get("when")
        try:
            ref = parse_flow_ref(when) if isinstance(when, str) else None
        except RefSyntaxError:
            ref = None
        if ref is None:
            self.error(
                raw, "activate", name, f"activate.when must be a ${{reference}}, not {when!r}"
            )
        return {"ref": when, "equals": act.get("is")}

    def _code(self, raw: YDict, name: str | None, source: Any) -> Path | None:
        path = source.get("path")
        if source.get("type") != "code" or not isinstance(path, str):
            self.error(raw, "source", name, "source must be {type: code, path: FILE}")
            return None
        if not (self.folder / path).is_file():
            included = self.includes.resolve(path)
            if included is not None:
                source["path"] = self.includes.relative(included)  # the converted flow's path
                return included
            self.error(raw, "source", name, f"source file {path!r} does not exist")
            return None
        return self.folder / path

    def python(self, raw: YDict, name: str | None, source: Any, inputs: dict[str, Any]) -> dict:
        aggregate = aggregation(raw)
        items: dict[str, Any] = {"type": "aggregate" if aggregate else "python"}
        path = self._code(raw, name, source)
        tool = find_tool(path) if path is not None else "missing"
        if isinstance(tool, str):
            if path is not None:
                self.error(raw, "source", name, tool)
            tool = ToolInfo("_missing_tool")
        inputs = self._literals(raw, name, inputs, tool.value_types, text=False)
        items.update(source=str(source.get("path")), function=tool.name, inputs=inputs)
        if aggregate:
            items["metrics"] = "logged"
        else:
            items["blocking"] = True  # a tool calls a model or a service: a thread, not inline
        return items

    def _literals(self, raw: YDict, name: str | None, given: dict, kinds: dict, text: bool) -> dict:
        where, out = raw.get("inputs") if isinstance(raw.get("inputs"), dict) else raw, {}
        for key, value in given.items():
            try:
                out[key] = literal_input(value, kinds.get(key), text)
            except (TypeError, ValueError):
                out[key], why = value, f"of value {value!r} is not of type {kinds[key]}"
                self.error(where, key, name, f"input {key!r} {why}")
        return out

    def llm(self, raw: YDict, name: str | None, source: Any, inputs: dict[str, Any]) -> dict:
        api = raw.get("api", "chat")
        if api != "chat":
            self.error(raw, "api", name, f"api: {api} is not supported; flowkit calls chat models")
        if aggregation(raw):
            self.error(raw, "aggregation", name, "an llm node cannot be an aggregation node")
        path = self._code(raw, name, source)
        literal = {k: v for k, v in inputs.items() if k in REQUEST_PARAMS and not is_ref(v)}
        params = self._literals(raw, name, literal, CHAT_PARAM_TYPES, text=True)
        variables = {
            k: v
            for k, v in inputs.items()
            if k not in REQUEST_PARAMS and k not in MODEL_PARAMS and k not in DROPPED_PARAMS
        }
        # A parameter given by a reference (`temperature: ${inputs.t}`) is read per row.
        variables.update(
            {PARAM_INPUT + k: v for k, v in inputs.items() if k in REQUEST_PARAMS and is_ref(v)}
        )
        items: dict[str, Any] = {
            "type": "llm",
            "prompt": str(source.get("path")) if path else "missing.jinja2",
            "inputs": variables,
            "params": params,
            "output": "text",
            "role_markers": "promptflow",
        }
        picked = {k: v for k, v in inputs.items() if k in MODEL_PARAMS and is_ref(v)}
        where = raw.get("inputs") if isinstance(raw.get("inputs"), dict) else raw
        for key, ref in picked.items():
            self.note(where, key, name, MODEL_BY_REF.format(key=key, ref=ref))
        fixed = {k: v for k, v in inputs.items() if k not in picked}
        return _with_endpoint(items, "model_default", fixed, raw.get("connection"))

    def prompt(self, raw: YDict, name: str | None, source: Any, inputs: dict[str, Any]) -> dict:
        path = self._code(raw, name, source)
        text = path.read_text(encoding="utf-8") if path is not None else ""
        return {
            "type": "python",
            "function": "flowkit.flow.templates:render_text",
            "inputs": {"template": text, **inputs},
        }

    def embedding(self, raw: YDict, name: str | None, source: Any, inputs: dict[str, Any]) -> dict:
        tool = source.get("tool")
        if tool != EMBEDDING_TOOL:
            self.error(
                raw,
                "source",
                name,
                f"package tool {tool!r} is not supported (only {EMBEDDING_TOOL} is)",
            )
        items: dict[str, Any] = {"type": "embedding", "inputs": {"text": inputs.get("input")}}
        return _with_endpoint(items, "model", inputs, inputs.get("connection"))


def _with_endpoint(
    items: dict[str, Any], model_key: str, inputs: dict[str, Any], connection: Any
) -> dict[str, Any]:
    """The node's model (a Prompt Flow deployment name) and its connection, when flowkit's
    configuration defines one of that name (otherwise flowkit's default connection serves)."""
    model = inputs.get("deployment_name") or inputs.get("model")
    if isinstance(model, str) and model:
        items[model_key] = model
    if isinstance(connection, str) and connection in _flowkit_connections():
        items["connection"] = connection
    return items


def _flowkit_connections() -> set[str]:
    """Connection names flowkit's configuration defines: a Prompt Flow connection of the same
    name is used; any other is left to flowkit's default connection (or --connection)."""
    from flowkit.llm.config import load_settings

    try:
        return set(load_settings().connections)
    except Exception:  # a broken flowkit.yaml is reported when the run resolves models
        return set()


def translate(file: Path, ctx: LoadContext) -> YDict | None:
    """The flowkit flow mapping for ``file``, or None after reporting why there is none."""
    shown = display(file)
    try:
        raw = read_yaml(file, shown)
    except YamlSyntaxError as err:
        ctx.diagnostics.append(err.diagnostic)
        return None
    except (OSError, UnicodeDecodeError) as err:
        ctx.report(shown, 0, None, f"cannot read flow file: {err}")
        return None
    if not isinstance(raw, YDict):
        ctx.report(shown, 1, None, "flow.dag.yaml must be a mapping with inputs, outputs, nodes")
        return None
    translation = _Translation(file, ctx)
    out = translation.flow(raw)
    NOTICES[str(file.resolve())] = translation.notices
    return out


def notices_for(flow_path: Path) -> list[str]:
    """What translating this flow file had to say (empty for native flows)."""
    return NOTICES.get(str(Path(flow_path).resolve()), [])
