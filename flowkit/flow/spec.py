"""The flow file's schema: pydantic models that reject unknown keys.

Each node kind owns its node's model (``Kind.spec_model``, a subclass of ``NodeSpec``): a node is
validated by the model of the kind its ``type`` names (``parse_node``), so a kind registered
with ``flowkit.kinds.register`` is a node type like the built-in ones. ``use:`` nodes are merged
by the loader before they reach these models, so every node here is complete.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails
from pydantic_core import ValidationError as PydanticError

InputType = Literal[
    "string", "text", "number", "integer", "boolean", "list", "object", "json", "any"
]
Comparable = str | int | float | bool | None
MAX_NAME_BYTES = 255
"""The longest file name most file systems take; a longer one fails as an OS error."""
MAX_PATH_BYTES = 1024
"""Well inside the usual PATH_MAX (4096), leaving room for the folder the path is relative to."""


def usable_path(value: str) -> str:
    """Reject a path the OS would refuse with an exception rather than 'no such file'."""
    if "\x00" in value:
        raise ValueError("a path cannot hold a NUL character")
    if len(value.encode()) > MAX_PATH_BYTES:
        raise ValueError(f"the path is longer than {MAX_PATH_BYTES} bytes")
    if any(len(part.encode()) > MAX_NAME_BYTES for part in value.replace("\\", "/").split("/")):
        raise ValueError(f"a name in the path is longer than {MAX_NAME_BYTES} bytes")
    return value


PathText = Annotated[str, AfterValidator(usable_path)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InputSpec(_Spec):
    type: InputType = "any"
    """The value's JSON type; CSV text is converted to it (`text`: any value, made a string;
    `json`: any value, a string decoded when it holds JSON, as Prompt Flow's `object`)."""
    default: Any = None
    """Used when the data gives no value; an input without one is required."""
    description: str | None = None
    """What the input means, shown by `flowkit list` and in errors."""

    @property
    def required(self) -> bool:
        return "default" not in self.model_fields_set


class WhenSpec(_Spec):
    ref: str
    """The reference whose value decides whether the node runs."""
    equals: Comparable | list[Comparable] = None
    """Run only when the value equals this (or is one of these); unset means 'is truthy'."""


class CacheSpec(_Spec):
    """What else belongs in a node's cache key, beyond its spec, code and inputs."""

    env: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = []
    """Environment variables the node's result depends on: their values join the key."""


class NodeSpec(_Spec):
    """What every node has; a kind's model adds its own fields and narrows ``type``."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """Unique within the flow; other nodes read this node's output as `${name.output}`."""
    inputs: dict[str, Any] = {}
    """Parameter name → a literal, or a value that is exactly one `${reference}`."""
    when: str | WhenSpec | list[str | WhenSpec] | None = None
    """Run the node only if this reference is truthy (or equals `equals`); a list: all must hold."""
    cache: bool | CacheSpec = True
    """False always recomputes this node; `{env: [VAR, ...]}` keys it on those variables too."""
    description: str | None = None
    """Free text for readers of the flow."""
    upstream_skipped: Literal["as_null", "propagate"] = "as_null"
    """`propagate`: an input read from a node skipped in this row is left out (the function's
    default applies, else null), and a node without `when` whose node inputs were all skipped is
    skipped too. `as_null`: such inputs are null and the node runs."""
    type: str
    """The node's kind: a name registered in flowkit.kinds (each kind narrows it to its own)."""


class PythonNode(NodeSpec):
    type: Literal["python"]
    function: str
    """`package.module:callable`, or a function name inside `source`."""
    source: PathText | None = None
    """A .py file relative to the flow file that defines `function`."""
    blocking: bool = False
    """The (sync) function waits on I/O: run it in a thread so other rows go on meanwhile."""


class Message(_Spec):
    role: Literal["system", "user", "assistant"]
    """The chat role of this message."""
    content: str
    """A Jinja2 template rendered with the node's inputs."""


class LlmNode(NodeSpec):
    type: Literal["llm"]
    prompt: PathText | None = None
    """A Jinja2 prompt file relative to the flow file; `system:`/`user:` lines start messages."""
    messages: list[Message] | None = None
    """Inline message templates, instead of a prompt file."""
    model: str | None = None
    """The chat model; falls back to --model, flowkit.yaml's default_model, then FLOWKIT_MODEL."""
    connection: str | None = None
    """A connection named in flowkit.yaml; the default connection when unset."""
    params: dict[str, Any] = {}
    """Request parameters passed to the API: temperature, max_tokens, seed, response_format, n…"""
    for_each: str | None = None
    """Name of an input holding a list: one call per element, the output a list of replies."""
    retries_on_invalid: int = Field(default=0, ge=0)
    """Ask again (with another seed) this many times when the reply holds no readable score."""
    expect: dict[str, Any] = {}
    """parse_score arguments (min, max, mode…) that decide whether a reply is readable."""
    output: Literal["auto", "text"] = "auto"
    """`text`: always the reply text, also when cut off at max_tokens (`auto` gives a dict then)."""
    role_markers: Literal["plain", "hashed", "promptflow"] = "plain"
    """`hashed` also reads a line `# system:` (one `#`) as a role marker, besides `system:`;
    `promptflow` is Prompt Flow's chat rules (empty turns kept, unset variables render empty)."""
    model_default: str | None = None
    """The model when neither the node, --model, flowkit.yaml nor FLOWKIT_MODEL names one."""

    @model_validator(mode="after")
    def _one_prompt_source(self) -> LlmNode:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("an llm node needs exactly one of 'prompt' or 'messages'")
        return self


class EmbeddingNode(NodeSpec):
    type: Literal["embedding"]
    model: str | None = None
    """The embeddings model; falls back like an llm node's model."""
    connection: str | None = None
    """A connection named in flowkit.yaml; the default connection when unset."""
    batch_size: int = Field(default=256, ge=1)
    """How many texts go into one embeddings request."""


class AggregateNode(NodeSpec):
    type: Literal["aggregate"]
    function: str
    """`package.module:callable` (or a name in `source`) that returns a dict of metrics."""
    source: PathText | None = None
    """A .py file relative to the flow file that defines `function`."""
    metrics: Literal["returned", "logged"] = "returned"
    """`logged`: the metrics are what the function passes to `flowkit.log_metric` (also reported
    under their bare names); its return value (any JSON) is not a metric."""


LATENCY_OUTPUT = "latency_seconds"
"""The output a flow node with `latency: true` adds to its sub-flow's."""
USAGE_OUTPUT = "usage"
"""The output a flow node with `usage: true` adds to its sub-flow's."""


class FlowNode(NodeSpec):
    type: Literal["flow"]
    flow: PathText
    """Another flow file (relative to this one) or a built-in flow's name, run as one node."""
    latency: bool = False
    """Add the sub-flow's wall time in each row to its outputs as `latency_seconds`."""
    usage: bool = False
    """Add the tokens its model calls took in each row (cached calls too) as `usage`."""


def parse_node(raw: dict[str, Any], model_of: Callable[[str], type[NodeSpec] | None]) -> NodeSpec:
    """Validate ``raw`` with the model of the kind its ``type`` names (``model_of``: None for a
    type no kind has).

    A missing or unknown type raises the errors a discriminated union on ``type`` would, so
    they read the same (flowkit.flow.spec_messages)."""
    if "type" not in raw:
        error = InitErrorDetails(
            type="union_tag_not_found", loc=(), input=raw, ctx={"discriminator": "'type'"}
        )
        raise PydanticError.from_exception_data("node", [error])
    tag = raw["type"]
    model = model_of(tag) if isinstance(tag, str) else None
    if model is None:
        # The types expected are named by flowkit.flow.spec_messages, from the kinds registry.
        ctx = {"discriminator": "'type'", "tag": str(tag), "expected_tags": "the registered kinds"}
        error = InitErrorDetails(type="union_tag_invalid", loc=(), input=raw, ctx=ctx)
        raise PydanticError.from_exception_data("node", [error])
    return model.model_validate(raw)


class FlowSpec(_Spec):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_\-]*$")
    """The flow's name; metrics are reported as `<name>.<metric>`."""
    description: str = ""
    """One line shown by `flowkit list`."""
    inputs: dict[str, InputSpec] = {}
    """The flow's typed inputs (names as in Python: `${inputs.NAME}` must be able to say them),
    filled per row from the data mapping."""
    outputs: dict[str, str] = {}
    """Output name → reference; the per-row results written to outputs.jsonl."""
    nodes: list[SerializeAsAny[NodeSpec]] = []
    """The steps, in any order: dependencies come from the references."""
    python_path: list[PathText] = []
    """Folders (relative to this file; `flowkit:DIR` is a folder inside flowkit) added to the end
    of Python's import path before the flow's code is imported, for the modules it imports."""
    shapes: list[list[str]] = []
    """The sets of inputs a row may give instead of one another (each a list of input names);
    a row must fill every input of at least one, so the run checks it before the first row."""

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, InputSpec]) -> dict[str, InputSpec]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(
                    f"input name {name!r} must be letters, digits and '_' (not starting with a "
                    "digit): ${inputs.NAME} and --map NAME=... must be able to say it"
                )
        return value

    @model_validator(mode="after")
    def _shapes_name_inputs(self) -> FlowSpec:
        for shape in self.shapes:
            unknown = [n for n in shape if n not in self.inputs]
            if unknown or not shape:
                what = f"names {unknown[0]!r}, not an input" if unknown else "is empty"
                raise ValueError(f"a shape {what}; a shape lists inputs of the flow")
        return self
