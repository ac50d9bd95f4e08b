"""`embedding` nodes: one text in, one vector out, batched across rows.

Rows run concurrently, so texts from many rows wait a moment together and go out as one
embeddings request of up to `batch_size` texts: far fewer requests than one per row.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowkit.flow.spec import EmbeddingNode
from flowkit.kinds import Binding, Compiled, Kind, NodeResult, register

if TYPE_CHECKING:
    from flowkit.engine.bound import BoundNode
    from flowkit.engine.context import RunContext
    from flowkit.flow.graph import Node
    from flowkit.flow.loader import LoadContext

BATCH_WAIT_SECONDS = 0.01


class _Batcher:
    """Collects texts for a short while, then embeds them in one request. One per bound node,
    so per run (``RunContext.batchers``)."""

    def __init__(self, node: BoundNode, ctx: RunContext) -> None:
        self.node, self.ctx = node, ctx
        self.queue: list[tuple[str, asyncio.Future[Any]]] = []
        self.timer: asyncio.TimerHandle | None = None

    def submit(self, text: str) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self.queue.append((text, fut))
        if len(self.queue) >= self.node.spec.batch_size:
            self._flush()
        elif self.timer is None:
            self.timer = loop.call_later(BATCH_WAIT_SECONDS, self._flush)
        return fut

    def _flush(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        batch, self.queue = self.queue, []
        if batch:
            asyncio.get_running_loop().create_task(self._send(batch))

    async def _send(self, batch: list[tuple[str, asyncio.Future[Any]]]) -> None:
        from flowkit.llm.client import embed

        endpoint = self.node.model_endpoint()
        try:
            result = await embed(
                endpoint,
                endpoint.model,
                [t for t, _ in batch],
                batch_size=self.node.spec.batch_size,
                timeout=self.ctx.timeout,
            )
        except Exception as err:
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(err)
            return
        share = {k: v // len(batch) for k, v in result.usage.items()}
        for (_, fut), vector in zip(batch, result.vectors, strict=True):
            if not fut.done():
                fut.set_result((vector, share))


@register
class EmbeddingKind(Kind):
    name = "embedding"
    spec_model = EmbeddingNode
    calls_endpoint = True

    def compile(self, node: Node, base_dir: Path, ctx: LoadContext) -> Compiled | None:
        if set(node.spec.inputs) != {"text"}:
            ctx.error(node, "an embedding node takes one input, 'text'", key="inputs")
            return None
        return Compiled(is_async=True)

    def prepare(self, node: Node, ctx: RunContext) -> Binding:
        endpoint = ctx.model_settings().check_embedding(
            ctx.flow_name,
            node.name,
            node.spec.connection,
            node.spec.model,
            ctx.options.concurrency,  # the endpoint's in-flight limit unless it sets one
        )
        return Binding(endpoint, endpoint.reached(chat=False))

    async def run(self, node: BoundNode, inputs: dict[str, Any], ctx: RunContext) -> NodeResult:
        text = inputs["text"]
        if not isinstance(text, str):
            raise TypeError(f"embedding input 'text' must be a string, got {type(text).__name__}")
        batcher = ctx.batchers.get(id(node))
        if batcher is None:
            batcher = ctx.batchers[id(node)] = _Batcher(node, ctx)
        vector, usage = await batcher.submit(text)
        return NodeResult(
            vector, llm={"model": node.model_endpoint().model, "messages": [], "usage": usage}
        )
