"""`llm` nodes: render the prompt, call the chat model through flowkit.llm, return the text.

With `n` > 1 or `logprobs` in params the output is a dict (`text`, `choices`, `top_logprobs`) so
that parse_score can combine samples or weight by probability; otherwise it is the reply text,
except for a reply cut off by the token limit, which comes as that dict with `finish_reason:
"length"` so that the judge's parser can tell.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.errors import did_you_mean, one_of
from flowkit.flow.spec import LlmNode
from flowkit.flow.templates import PromptSyntaxError, from_file_text, from_messages
from flowkit.kinds import Binding, Compiled, Kind, NodeResult, register

if TYPE_CHECKING:
    from flowkit.engine.bound import BoundNode
    from flowkit.engine.context import RunContext
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext


PARAM_INPUT = "__param_"
"""A node input named `__param_X` is the request parameter X, read per row: Prompt Flow's
`temperature: ${inputs.t}` on an llm node (literal parameters stay in ``params``)."""


def row_params(inputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the template's variables, the request parameters this row's inputs give)."""
    if not any(k.startswith(PARAM_INPUT) for k in inputs):
        return inputs, {}
    variables = {k: v for k, v in inputs.items() if not k.startswith(PARAM_INPUT)}
    params = {
        k[len(PARAM_INPUT) :]: v
        for k, v in inputs.items()
        if k.startswith(PARAM_INPUT) and v is not None
    }
    return variables, params


@dataclass(frozen=True, slots=True)
class LlmImpl:
    """The compiled prompt; the endpoint is the run's (``BoundNode.endpoint``)."""

    template: Any
    prompt_file: str | None
    rich_output: bool


def compile_prompt(node: Node, base_dir: Path, ctx: LoadContext) -> Any:
    """The node's prompt template, or None after reporting why it cannot be used."""
    from flowkit.errors import display

    spec = node.spec
    if spec.messages is not None:
        try:
            return from_messages([(m.role, m.content) for m in spec.messages])
        except PromptSyntaxError as err:
            ctx.error(node, f"{err} (in messages, template line {err.line})", key="messages")
            return None
    path = (base_dir / spec.prompt).resolve()
    if not path.is_file():
        ctx.error(
            node,
            f"prompt file {spec.prompt!r} does not exist (looked at {display(path)})",
            key="prompt",
        )
        return None
    try:
        text = path.read_text(encoding="utf-8")
        return from_file_text(
            text, hashed=spec.role_markers == "hashed", promptflow=spec.role_markers == "promptflow"
        )
    except PromptSyntaxError as err:
        where = f"the prompt of node {node.name!r} at {ctx.where(node, 'prompt')}"
        ctx.report(display(path), err.line, node.name, f"{err} (in {where})")
    except UnicodeDecodeError:
        ctx.error(node, f"prompt file {spec.prompt!r} is not UTF-8 text", key="prompt")
    return None


def check_variables(node: Node, variables: frozenset[str], ctx: LoadContext) -> None:
    provided = set(node.spec.inputs)
    for name in sorted(variables - provided):
        ctx.error(
            node,
            f"prompt variable {name!r} is not provided by the node's inputs"
            f"{did_you_mean(name, provided)}; inputs: {one_of(provided)}",
            key="inputs",
        )


def _readable(text: str, expect: dict[str, Any]) -> bool:
    from flowkit.metrics.scores import parse_score

    return parse_score(text, **expect)["result"] != "invalid"


@register
class LlmKind(Kind):
    name = "llm"
    spec_model = LlmNode
    path_fields = ("prompt",)
    calls_endpoint = True

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        template = compile_prompt(node, base_dir, ctx)
        if template is None:
            return None
        if node.spec.role_markers != "promptflow":  # there, an unset variable renders empty
            check_variables(node, template.variables, ctx)
        each = node.spec.for_each
        if each is not None and each not in node.spec.inputs:
            ctx.error(
                node,
                f"for_each names {each!r}, which is not one of the node's inputs"
                f"{did_you_mean(each, node.spec.inputs)}",
                key="for_each",
            )
        params = node.spec.params
        rich = node.spec.output == "auto" and (
            int(params.get("n", 1) or 1) > 1 or bool(params.get("logprobs"))
        )
        return Compiled(
            LlmImpl(template, node.spec.prompt, rich), {"prompt": template.source}, is_async=True
        )

    def prepare(self, node: Node, ctx: RunContext) -> Binding:
        spec, settings = node.spec, ctx.model_settings()
        model = spec.model or (None if settings.default_model else spec.model_default)
        endpoint = settings.check(
            ctx.flow_name,
            node.name,
            spec.connection,
            model,
            ctx.options.concurrency,  # the endpoint's in-flight limit unless it sets one
        )
        # What selects the model (its name; an Azure deployment) enters the key, the server
        # address does not: a cache is meant to survive moving between equivalent endpoints.
        return Binding(endpoint, endpoint.reached())

    async def run(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        each = node.spec.for_each
        if each is None:
            output, meta = await _ask(node, inputs, ctx)
            return NodeResult(output, llm=meta)
        items = inputs[each]
        if not isinstance(items, list):
            raise TypeError(f"for_each input {each!r} must be a list, got {type(items).__name__}")
        # One call per element, all under the endpoint's scheduler at once.
        done = await asyncio.gather(*(_ask(node, {**inputs, each: item}, ctx) for item in items))
        usage: dict[str, int] = {}
        for _, meta in done:
            for k, v in meta["usage"].items():
                usage[k] = usage.get(k, 0) + v
        meta = {
            "model": done[0][1]["model"] if done else node.model_endpoint().model,
            "request": done[0][1]["request"] if done else None,
            "messages": [{"item": i, "messages": m["messages"]} for i, (_, m) in enumerate(done)],
            "usage": usage,
            "finish_reason": done[-1][1]["finish_reason"] if done else None,
            "attempts": sum(m["attempts"] for _, m in done),
            "raw": {"items": len(done)},
        }
        return NodeResult([out for out, _ in done], llm=meta)


def _shown(params: dict[str, Any]) -> dict[str, Any]:
    """Params as recorded: header values (keys for gateways) masked."""
    headers = params.get("extra_headers")
    if not isinstance(headers, dict):
        return params
    return {**params, "extra_headers": {k: "****" for k in headers}}


def _raw(asked: int, batches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What a trace keeps of how the reply was got: the prompts asked when more than one, and
    for batched replies their batches with the errors each met before it was answered."""
    raw: dict[str, Any] = {"asked": asked} if asked > 1 else {}
    if batches:
        raw["batches"] = batches
    return raw or None


async def _ask(
    node: BoundNode, inputs: dict[str, Any], ctx: RunContext
) -> tuple[Any, dict[str, Any]]:
    """One rendered prompt, asked until readable (``retries_on_invalid``); (output, trace meta)."""
    from flowkit.llm.client import chat

    impl: LlmImpl = node.impl
    inputs, given = row_params(inputs)
    messages = impl.template.render(inputs)
    endpoint = node.model_endpoint()
    params = {**node.spec.params, **given}
    usage: dict[str, int] = {}
    asked = 0
    batches: list[dict[str, Any]] = []
    while True:
        result = await chat(endpoint, endpoint.model, messages, params, timeout=ctx.timeout)
        asked += 1
        if result.batch is not None:
            batches.append(result.batch)
        for k, v in result.usage.items():
            usage[k] = usage.get(k, 0) + int(v or 0)
        cut_off = result.finish_reason == "length"
        if asked > node.spec.retries_on_invalid or (
            not cut_off and _readable(result.text, node.spec.expect)
        ):
            break
        # The same request would get the same (cached or deterministic) answer; a new seed
        # asks for another sample.
        params["seed"] = int(params.get("seed") or 0) + 1
    meta = {
        "model": result.model,
        # The server asked (never a key): on a scale-out run, which one a worker reached.
        "request": {
            "model": endpoint.model,
            "endpoint": endpoint.fingerprint()["url"],
            "params": _shown(params),
        },
        "messages": messages,
        "usage": usage,
        "finish_reason": result.finish_reason,
        "attempts": result.attempts,
        "raw": _raw(asked, batches),
    }
    # A reply cut off at the token limit keeps its text but comes in the dict form, whose
    # finish_reason lets parse_score report it invalid instead of reading a half-written verdict.
    if impl.rich_output or (cut_off and node.spec.output == "auto"):
        output: Any = {
            "text": result.text,
            "choices": result.texts,
            "top_logprobs": result.top_logprobs,
            "finish_reason": result.finish_reason,
        }
    else:
        output = result.text
    return output, meta


def prompt_warnings(flow: Any) -> list[str]:
    """Warnings for the llm nodes of ``flow`` (its sub-flows' too) whose prompt never uses an
    input the flow passes to it: the judge would never see that value (a custom template that
    lacks ``{{ context }}`` validates, and every row is judged without its context).

    Not for nodes read from Prompt Flow folders: they keep Prompt Flow's rules, where an
    input the prompt leaves unused is no mistake."""
    found: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo = [flow]
    while todo:
        current = todo.pop(0)
        for node in current.nodes.values():
            if node.kind == "flow" and node.impl is not None:
                todo.append(node.impl)
            if node.kind != "llm" or not isinstance(node.impl, LlmImpl):
                continue
            if node.spec.role_markers == "promptflow" or (node.file, node.name) in seen:
                continue
            seen.add((node.file, node.name))
            variables = node.impl.template.variables
            passed = [k for k in node.spec.inputs if not k.startswith(PARAM_INPUT)]
            where = f"prompt {node.spec.prompt!r}" if node.spec.prompt else "its messages"
            for name in passed:
                if name not in variables:
                    found.append(
                        f"warning: {node.file}:{node.line}: node {node.name!r}: input {name!r} "
                        f"is passed to {where}, which never uses it (add {{{{ {name} }}}} "
                        "to the template, or remove the input)"
                    )
    return found
