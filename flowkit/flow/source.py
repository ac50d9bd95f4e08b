"""YAML read with source positions, so that every validation message can name a file and line.

Mappings and sequences come back as ``YDict``/``YList``: ordinary containers that also remember
the file they came from and the line of each key or item. ``locate`` walks a pydantic error
location through them to the nearest line.

Whatever the text, reading it either succeeds or raises ``YamlSyntaxError``: lone surrogates,
nesting deeper than ``MAX_DEPTH`` and aliases that expand past ``MAX_VALUES`` are refused here,
before they can crash or stall what reads the values.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import yaml

from flowkit.errors import Diagnostic


class YDict(dict):
    """A mapping that remembers where it and each of its keys stand in the source."""

    file: str = ""
    line: int = 0
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return getattr(self, "key_lines", {}).get(key, self.line)


class YList(list):
    """A sequence that remembers where it and each of its items stand in the source."""

    file: str = ""
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        lines = getattr(self, "item_lines", [])
        return lines[index] if 0 <= index < len(lines) else self.line


def _make_loader(file: str, fast: bool = False) -> type[yaml.SafeLoader]:
    """``fast``: on libyaml's parser, when PyYAML has it (several times quicker); its error
    messages differ, so a file it refuses is read again by the pure one for the report."""
    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader) if fast else yaml.SafeLoader

    class _Loader(base):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> YDict:
            self.flatten_mapping(node)
            out = YDict()
            out.file, out.line, out.key_lines = file, node.start_mark.line + 1, {}
            for key_node, value_node in node.value:
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, "a mapping key must be a plain value", key_node.start_mark
                    )
                if not isinstance(key, str):
                    # A key is a name, as written: YAML 1.1 would make `yes:` True and `1:`
                    # an int, which no JSON value (a cache key, a trace) can hold as a key,
                    # and which `yes_no: {yes: 1, no: 0}` means as the words.
                    key = key_node.value
                out[key] = self.construct_object(value_node, deep=True)
                out.key_lines[key] = key_node.start_mark.line + 1
            return out

        def construct_sequence(self, node: yaml.SequenceNode, deep: bool = False) -> YList:
            out = YList(self.construct_object(child, deep=True) for child in node.value)
            out.file, out.line = file, node.start_mark.line + 1
            out.item_lines = [child.start_mark.line + 1 for child in node.value]
            return out

        def construct_text(self, node: yaml.ScalarNode) -> str:
            text = self.construct_scalar(node)
            # A "\ud800" escape gives a lone surrogate: no file, hash or JSON can hold it.
            if (bad := _SURROGATE.search(text)) is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the text holds {bad[0].encode('unicode_escape').decode()}, half of a "
                    "UTF-16 surrogate pair, which is not a character",
                    node.start_mark,
                )
            return text

    _Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_mapping)
    _Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_sequence)
    _Loader.add_constructor("tag:yaml.org,2002:str", _Loader.construct_text)
    return _Loader


_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_DEPTH = 64
"""Deeper nesting is no flow a person wrote, and would exhaust the stack of what reads it."""
MAX_VALUES = 100_000
"""Values in a file once its aliases are expanded: a few nested `*alias` lists can otherwise
stand for billions of values (the "billion laughs")."""
MAX_CHARS = 32 << 20
"""Characters of text in a file once its aliases are expanded: one long string aliased a
thousand times is few values but gigabytes once the flow is hashed or written out."""


def _check_shape(root: Any, file: str) -> None:
    """Raise ``YamlSyntaxError`` when the parsed value nests too deep or expands too far.

    Iterative, and memoised by identity: an alias is one shared object, so it is measured once.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    chars: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        value, done = stack.pop()
        if not isinstance(value, (dict, list)) or (id(value) in size and not done):
            continue
        children = list(value.values() if isinstance(value, dict) else value)
        if not done:
            stack.append((value, True))
            stack.extend((c, False) for c in children if isinstance(c, (dict, list)))
            continue
        inner = [c for c in children if isinstance(c, (dict, list))]
        depth[id(value)] = 1 + max((depth[id(c)] for c in inner), default=0)
        size[id(value)] = len(children) + sum(size[id(c)] for c in inner)
        text = list(value) if isinstance(value, dict) else []
        chars[id(value)] = sum(len(c) for c in (*children, *text) if isinstance(c, str)) + sum(
            chars[id(c)] for c in inner
        )
        line = getattr(value, "line", 0)
        if chars[id(value)] > MAX_CHARS:
            raise YamlSyntaxError(
                Diagnostic(
                    file,
                    line,
                    None,
                    f"the text here expands to more than {MAX_CHARS:,} characters "
                    "(long strings repeated through aliases, *name)",
                )
            )
        if depth[id(value)] > MAX_DEPTH:
            raise YamlSyntaxError(
                Diagnostic(file, line, None, f"values nest more than {MAX_DEPTH} levels deep")
            )
        if size[id(value)] > MAX_VALUES:
            raise YamlSyntaxError(
                Diagnostic(
                    file,
                    line,
                    None,
                    f"the aliases (*name) here expand to more than {MAX_VALUES} values",
                )
            )


# A whole-token reference inside a flow collection, e.g. the value in `{text: ${judge.output}}`.
# Plain YAML reads `{` there as a nested mapping; quoting the token keeps the documented syntax.
_BARE_REF = re.compile(
    r"(?P<pre>(?:[\[,{]|:[ \t]|-[ \t])[ \t]*)(?P<ref>\$\{[^{}\"'\n]*\})(?=[ \t]*(?:[,}\]]|#|$))",
    re.M,
)


def _quoted(text: str) -> str:
    return _BARE_REF.sub(r'\g<pre>"\g<ref>"', text)


def parse_yaml(text: str, file: str) -> Any:
    """Parse YAML text; raise ``Diagnostic``-carrying ``YamlSyntaxError`` on bad syntax."""
    fast = _make_loader(file, fast=True)
    try:
        return _load(text, fast, file)
    except (yaml.YAMLError, YamlSyntaxError):
        if (patched := _quoted(text)) != text:
            with contextlib.suppress(yaml.YAMLError, YamlSyntaxError):
                return _load(patched, fast, file)
    # Refused either way: read again by the pure parser, for the messages users know.
    loader = _make_loader(file)
    try:
        value = _load(text, loader, file)
    except yaml.YAMLError as first:
        # Only when plain YAML fails do we quote bare `${...}` tokens and try once more, so
        # valid YAML is never rewritten. Quoting adds columns, never lines, so lines stay true.
        patched = _quoted(text)
        if patched != text:
            try:
                return _load(patched, loader, file)
            except yaml.YAMLError as second:
                # Quoted, the parser got further: the first error was only about bare
                # references, and this one is the file's real problem.
                if _mark(second)[0] > _mark(first)[0]:
                    raise YamlSyntaxError(_yaml_diagnostic(second, file, text)) from None
        raise YamlSyntaxError(_yaml_diagnostic(first, file)) from None
    return value


def _load(text: str, loader: type[yaml.SafeLoader], file: str) -> Any:
    try:
        value = yaml.load(text, Loader=loader)
    except RecursionError:
        # PyYAML's parser recurses once per level of nesting.
        raise YamlSyntaxError(
            Diagnostic(file, 0, None, f"values nest more than {MAX_DEPTH} levels deep")
        ) from None
    _check_shape(value, file)
    return value


class YamlSyntaxError(Exception):
    """Internal carrier of a YAML syntax diagnostic; the loader turns it into a report."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(str(diagnostic))
        self.diagnostic = diagnostic


def _mark(err: yaml.YAMLError) -> tuple[int, int]:
    """(0-based line, column) of a YAML error, or (-1, -1) when it has no position."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    return (mark.line, mark.column) if mark else (-1, -1)


def _yaml_diagnostic(err: yaml.YAMLError, file: str, original: str | None = None) -> Diagnostic:
    """``original``: the text before bare references were quoted, to map the column back."""
    line0, col0 = _mark(err)
    if original is not None and line0 >= 0:
        lines, at = original.splitlines(), col0
        for k, m in enumerate(_BARE_REF.finditer(lines[line0] if line0 < len(lines) else "")):
            # the quotes added around this reference stand at these columns of the patched line
            col0 -= (m.start("ref") + 2 * k < at) + (m.end("ref") + 2 * k + 1 < at)
    line = line0 + 1 if line0 >= 0 else 0
    column = f", column {col0 + 1}" if line0 >= 0 else ""
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    detail = f"{context}: {problem}" if context else problem
    return Diagnostic(file, line, None, f"YAML syntax error{column}: {detail}")


def is_file(path: Path) -> bool:
    """``Path.is_file``, but False rather than an exception for a name the OS cannot take."""
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return False


def read_yaml(path: Path, name: str | None = None) -> Any:
    """Parse a YAML file; ``name`` is how messages should show the file."""
    return parse_yaml(path.read_text(encoding="utf-8"), name or str(path))


def locate(root: Any, loc: tuple[Any, ...]) -> tuple[str, int]:
    """The file and line nearest to a pydantic error location inside ``root``."""
    node, file, line = root, getattr(root, "file", ""), getattr(root, "line", 0)
    for part in loc:
        if (isinstance(node, YDict) and part in node) or (
            isinstance(node, YList) and isinstance(part, int) and part < len(node)
        ):
            file, line, node = node.file or file, node.line_of(part), node[part]
        # A part that is not in the data (a union tag such as 'llm') is skipped, not fatal.
    return file, line


def line_of(container: Any, key: Any) -> int:
    """Line of ``key`` in a YAML container, or 0 when the value did not come from YAML."""
    if isinstance(container, (YDict, YList)):
        return container.line_of(key)
    return 0
