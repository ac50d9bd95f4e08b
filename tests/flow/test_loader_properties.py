"""Whatever a flow file holds, loading it either succeeds or raises a FlowkitError.

The inputs are random: text and bytes, random YAML structures, the built-in flows with random
damage (keys deleted, values of the wrong type, stray references, cycles, unknown kinds, bad
`when` clauses, bad `use:` targets) and random flows built from plausible parts. Anything but a
FlowkitError escaping would reach a user as a traceback. Each failure must also say where: every
problem names a file.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowkit.errors import FlowkitError, ValidationError
from flowkit.flow.loader import load_flow, load_flows
from flowkit.flow.refs import RefSyntaxError, parse_data_ref, parse_flow_ref
from flowkit.flow.source import parse_yaml
from tests.support import REPO

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
BUILTIN = sorted((REPO / "flows").glob("*.yaml"))


def plain(value: Any) -> Any:
    """Parsed YAML (YDict/YList) as plain dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


ORIGINALS = {p.stem: plain(parse_yaml(p.read_text("utf-8"), p.name)) for p in BUILTIN}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of flows/ and prompts/, so damaged flows still find their prompts and node files."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(REPO / "flows", root / "flows")
    shutil.copytree(REPO / "prompts", root / "prompts")
    (root / "flows" / "helper.py").write_text("def f(x=None, **kw):\n    return x\n", "utf-8")
    (root / "flows" / "binary.yaml").write_bytes(b"\xff\xfe\x00name: x")
    (root / "flows" / "nodes" / "nul.yaml").write_text('type: llm\nprompt: "x\\0y"\n', "utf-8")
    yield root


def check(path: Path) -> None:
    """The property: the load succeeds, or fails with a FlowkitError that says where."""
    try:
        load_flow(path)
    except ValidationError as err:
        assert err.diagnostics, "a ValidationError must carry its problems"
        for d in err.diagnostics:
            assert d.file.strip() and d.message.strip(), d
            assert str(d) in str(err)
    except FlowkitError as err:  # pragma: no cover - would be a new kind of failure
        raise AssertionError(f"loading a file raised {type(err).__name__}: {err}") from err


def put(tree: Path, content: str | bytes, name: str = "fuzz.yaml") -> Path:
    path = tree / "flows" / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, "utf-8", errors="surrogatepass")
    return path


def dump(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)


# --------------------------------------------------------------------------- building blocks

KEYS = [
    "name", "type", "inputs", "outputs", "nodes", "when", "use", "prompt", "messages",
    "function", "source", "flow", "params", "for_each", "expect", "retries_on_invalid",
    "cache", "model", "connection", "batch_size", "description", "default", "ref", "equals",
    "role", "content",
]  # fmt: skip
NAMES = ["judge", "parse", "summary", "a", "b", "inputs", "data", "run", "output", "9x", ""]
FUNCTIONS = [
    "flowkit.metrics.scores:parse_score",
    "flowkit.metrics.aggregate:mean",
    "flowkit.metrics.aggregate:nope",
    "no_such_module:f",
    "flowkit.metrics.scores",
    ":",
    "f",
    "a:b:c",
]
PATHS = [
    "nodes/parse_score.yaml",
    "nodes/missing.yaml",
    "nodes/nul.yaml",
    "../prompts/coherence.jinja2",
    "../prompts",
    "helper.py",
    "binary.yaml",
    "fuzz.yaml",
    "coherence",
    "groundedness.yaml",
    "/",
    "",
    ".",
    "x\x00y",
    "a" * 300,
    "b/" * 600,
]

texts = st.text(max_size=30)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
refs = st.builds(
    lambda head, rest: "${" + head + rest + "}",
    st.sampled_from([*NAMES, "inputs", " inputs "]),
    st.sampled_from(
        ["", ".output", ".output.score", ".output[0]", "[0]", ".x", ".", "..", ".output.a[-1]"]
    )
    | st.text(alphabet="abc.[]0-_ ", max_size=8).map(lambda t: "." + t),
)
junk = st.one_of(
    scalars,
    refs,
    st.sampled_from([*FUNCTIONS, *PATHS, "llm", "python", "pyhton", "flow", "aggregate"]),
    st.lists(st.one_of(scalars, refs), max_size=3),
    st.dictionaries(st.sampled_from(KEYS), st.one_of(scalars, refs), max_size=3),
)
whens = st.one_of(
    refs,
    junk,
    st.lists(refs | junk, max_size=3),
    st.fixed_dictionaries({"ref": refs | junk}, optional={"equals": junk}),
)
structures = st.recursive(
    scalars | refs,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | texts, inner, max_size=5)
    ),
    max_leaves=25,
)


# --------------------------------------------------------------------------- arbitrary files


@SETTINGS
@given(text=st.text(max_size=300))
def test_random_text(tree: Path, text: str) -> None:
    check(put(tree, text))


@SETTINGS
@given(data=st.binary(max_size=300))
def test_random_bytes(tree: Path, data: bytes) -> None:
    check(put(tree, data))


YAMLISH = st.lists(
    st.sampled_from(
        [
            "name: f\n",
            "nodes:\n",
            "  - ",
            "name: a\n",
            "    type: llm\n",
            "inputs: ",
            "{x: ${a.output}}",
            "[",
            "]",
            "{",
            "}",
            ": ",
            "- ",
            "&a ",
            "*a ",
            "<<: *a\n",
            "!!python/object:os.system ",
            "'",
            '"',
            "\\ud800",
            "#",
            "\t",
            "\n",
            "  ",
            "${",
            "}}",
            "---\n",
            "...\n",
            "? ",
            "|\n",
            ">-\n",
            "%YAML 1.1\n",
            "!!binary ",
            "\x00",
            "\ufeff",
        ]
    )
    | st.text(max_size=5),
    max_size=40,
).map("".join)


@SETTINGS
@given(text=YAMLISH)
def test_yaml_like_text(tree: Path, text: str) -> None:
    check(put(tree, text))


@SETTINGS
@given(value=structures)
def test_random_structures(tree: Path, value: Any) -> None:
    check(put(tree, dump(value)))


# --------------------------------------------------------------------------- damaged built-ins


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (the root excluded)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, (dict, list)):
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            found.append((*path, key))
            found.extend(_places(child, (*path, key)))
    return found


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


@st.composite
def damaged(draw: st.DrawFn) -> dict[str, Any]:
    """A built-in flow with one to four kinds of damage."""
    flow = copy.deepcopy(ORIGINALS[draw(st.sampled_from(sorted(ORIGINALS)))])
    for _ in range(draw(st.integers(1, 4))):
        places = _places(flow)
        listed = flow.get("nodes")
        nodes = [n for n in listed if isinstance(n, dict)] if isinstance(listed, list) else []
        op = draw(st.sampled_from(["delete", "retype", "ref", "cycle", "kind", "when", "use"]))
        if op in ("delete", "retype", "ref") and places:
            where = draw(st.sampled_from(places))
            parent = _at(flow, where[:-1])
            if op == "delete":
                del parent[where[-1]]
            else:
                parent[where[-1]] = draw(refs if op == "ref" else junk)
        elif op == "cycle" and len(nodes) >= 2:
            a, b = draw(st.permutations(nodes))[:2]
            for src, dst in ((a, b), (b, a)):
                if isinstance(src.get("inputs"), dict) and isinstance(dst.get("name"), str):
                    src["inputs"]["loop"] = "${" + dst["name"] + ".output}"
        elif nodes:
            node = draw(st.sampled_from(nodes))
            if op == "kind":
                node["type"] = draw(st.sampled_from(["pyhton", "LLM", "", "agent"]) | junk)
            elif op == "when":
                node["when"] = draw(whens)
            else:
                node["use"] = draw(st.sampled_from(PATHS) | junk)
        else:
            flow[draw(st.sampled_from(KEYS))] = draw(junk)
    return flow


@pytest.mark.slow
@SETTINGS
@given(flow=damaged())
def test_damaged_builtin_flows(tree: Path, flow: dict[str, Any]) -> None:
    check(put(tree, dump(flow)))


# --------------------------------------------------------------------------- random flows


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    node: dict[str, Any] = {"name": draw(st.sampled_from(NAMES) | texts)}
    kinds = ["python", "llm", "aggregate", "flow", "embedding", "use", "junk", "none"]
    kind = draw(st.sampled_from(kinds))
    if kind == "use":
        node["use"] = draw(st.sampled_from(PATHS))
    elif kind == "junk":
        node["type"] = draw(junk)
    elif kind != "none":
        node["type"] = kind
    if kind in ("python", "aggregate"):
        node["function"] = draw(st.sampled_from(FUNCTIONS))
        if draw(st.booleans()):
            node["source"] = draw(st.sampled_from(PATHS))
    elif kind == "llm":
        if draw(st.booleans()):
            node["prompt"] = draw(st.sampled_from(PATHS))
        else:
            content = draw(st.sampled_from(["{{ x }}", "{{ x", "{% for %}", "hi", "{{ y.z }}"]))
            node["messages"] = [
                {"role": draw(st.sampled_from(["user", "bot"])), "content": content}
            ]
        if draw(st.booleans()):
            node["for_each"] = draw(st.sampled_from(["x", "y"]) | junk)
        if draw(st.booleans()):
            node["params"] = draw(st.dictionaries(texts, junk, max_size=2) | junk)
    elif kind == "flow":
        node["flow"] = draw(st.sampled_from(PATHS))
    node["inputs"] = draw(
        st.dictionaries(st.sampled_from(["x", "y", "text", "scores"]), refs | junk)
    )
    if draw(st.booleans()):
        node["when"] = draw(whens)
    if draw(st.integers(0, 4)) == 0:
        node[draw(st.sampled_from(KEYS))] = draw(junk)
    return node


flows = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["f", "my-flow", "9", ""]) | texts,
        "nodes": st.lists(nodes(), max_size=5),
    },
    optional={
        "inputs": st.dictionaries(
            st.sampled_from(["x", "y", "text"]),
            st.fixed_dictionaries(
                {},
                optional={"type": st.sampled_from(["string", "number", "text"]), "default": junk},
            )
            | junk,
            max_size=3,
        ),
        "outputs": st.dictionaries(st.sampled_from(["o", "score"]), refs | junk, max_size=3),
        "description": junk,
    },
)


@SETTINGS
@given(flow=flows)
def test_random_flows(tree: Path, flow: dict[str, Any]) -> None:
    check(put(tree, dump(flow)))


@SETTINGS
@given(text=refs | st.text(alphabet="abc.[]09_ -{}$\n", max_size=20).map(lambda b: "${" + b + "}"))
def test_references_parse_or_raise_ref_syntax_errors(text: str) -> None:
    for parse in (parse_flow_ref, parse_data_ref):
        try:
            parse(text)
        except RefSyntaxError as err:
            assert str(err).strip()


# --------------------------------------------------------------------------- found by the above


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: f\nnodes:\n  - {name: a, type: [llm], function: x}\n",
            "fuzz.yaml:3: node 'a': unknown node type \"['llm']\" (did you mean 'llm'?); "
            "expected one of python, llm, embedding, aggregate, flow",
        ),
        (
            'name: f\nnodes:\n  - {name: a, type: flow, flow: "x\\0y"}\n',
            "fuzz.yaml:3: node 'a': flow: a path cannot hold a NUL character",
        ),
        (
            f"name: f\nnodes:\n  - {{name: a, type: llm, prompt: {'p' * 300}}}\n",
            "fuzz.yaml:3: node 'a': prompt: a name in the path is longer than 255 bytes",
        ),
        (
            f"name: f\nnodes:\n  - {{name: a, type: python, function: f, source: {'d/' * 600}}}\n",
            "fuzz.yaml:3: node 'a': source: the path is longer than 1024 bytes",
        ),
        (
            'name: f\nnodes:\n  - {name: a, use: "x\\0y"}\n',
            "fuzz.yaml:3: node 'a': use: a path cannot hold a NUL character",
        ),
        (
            "name: f\nnodes:\n  - {name: a, use: nodes/nul.yaml}\n",
            "fuzz.yaml:3: node 'a': prompt: a path cannot hold a NUL character",
        ),
        (
            "name: f\nnodes:\n  - {name: a, use: binary.yaml}\n",
            "fuzz.yaml:3: node 'a': node file 'binary.yaml' is not UTF-8 text (invalid start byte)",
        ),
        (
            'name: "\\ud800"\n',
            "fuzz.yaml:1: YAML syntax error, column 7: the text holds \\ud800, half of a UTF-16 "
            "surrogate pair, which is not a character",
        ),
        ("x: " + "[" * 70 + "]" * 70 + "\n", "fuzz.yaml:1: values nest more than 64 levels deep"),
        ("- " * 2000, "fuzz.yaml: values nest more than 64 levels deep"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, c in zip("abcd", "bcde", strict=True)
            )
            + "nodes: [*e]\n",
            "fuzz.yaml:5: the aliases (*name) here expand to more than 100000 values",
        ),
    ],
    ids=[
        "unhashable-type",
        "nul-in-flow",
        "long-name",
        "long-path",
        "nul-in-use",
        "nul-in-used-file",
        "binary-use",
        "surrogate",
        "deep-flow-list",
        "deep-block-list",
        "alias-bomb",
    ],
)
def test_inputs_that_once_escaped(
    tree: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    monkeypatch.chdir(tree / "flows")
    with pytest.raises(ValidationError) as err:
        load_flow(put(tree, text))
    assert message in [str(d) for d in err.value.diagnostics]


@pytest.mark.parametrize(
    ("name", "shown", "why"),
    [
        ("a" * 300, "a" * 77 + "...", "File name too long"),
        ("a" * 300 + ".yaml", "a" * 77 + "...", "File name too long"),
        ("x\x00y.yaml", "x\\x00y.yaml", "embedded null byte"),
    ],
)
def test_a_flow_name_the_os_refuses(name: str, shown: str, why: str) -> None:
    for load in (lambda: load_flow(name), lambda: load_flows([name, "f1_score"])):
        with pytest.raises(ValidationError) as err:
            load()
        assert [str(d) for d in err.value.diagnostics] == [f"{shown}: cannot open: {why}"]
