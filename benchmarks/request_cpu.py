"""CPU per chat call in the SDK: its own ``client.post`` against flowkit's prepared request,
with a bare aiohttp client as the floor.

    python benchmarks/request_cpu.py [--calls 3000] [--concurrency 32] [--rounds 2]

``post`` and ``prepared`` send the same chat completion (the body the judge sends) through one
SDK client on its aiohttp transport to the test server (a child process, 100 ms latency),
``--concurrency`` at a time, with nothing of flowkit's scheduler or executor around them: the
figure is the SDK's cost alone. ``raw`` sends it with aiohttp and no SDK, as the llm benchmarks'
ceiling does. The three alternate for ``--rounds`` rounds so the machine's load falls on all.
Prints each round's calls per second and the CPU this process spent per call.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp
from common import judge_body, load_average

from flowkit.llm.clients import _transport
from flowkit.llm.prepared import post_chat
from flowkit.testing.server import ServerConfig, serve_subprocess

HEADERS = {"X-Stainless-Raw-Response": "true"}


async def measure(base_url: str, way: str, calls: int, concurrency: int) -> tuple[float, float]:
    import openai

    if way == "raw":
        return await measure_raw(base_url, calls, concurrency)

    client = openai.AsyncOpenAI(
        api_key="not-needed",
        base_url=base_url,
        max_retries=0,
        timeout=30.0,
        http_client=_transport(concurrency),
    )
    todo = iter(range(calls))

    async def worker() -> None:
        for i in todo:
            body = judge_body(i)
            if way == "post":
                options = {"headers": HEADERS, "timeout": 30.0}
                raw = await client.post(
                    "/chat/completions", body=body, cast_to=object, options=options
                )
                response = raw.http_response
            else:
                response = await post_chat(client, body, headers={}, query=None, timeout=30.0)
            assert response is not None and response.json()["choices"]

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    await client.close()
    return calls / elapsed, used / calls * 1000


async def measure_raw(base_url: str, calls: int, concurrency: int) -> tuple[float, float]:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        todo = iter(range(calls))

        async def worker() -> None:
            for i in todo:
                async with session.post(f"{base_url}/chat/completions", json=judge_body(i)) as r:
                    assert (await r.json())["choices"]

        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    return calls / elapsed, used / calls * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with serve_subprocess(ServerConfig(latency=0.1)) as srv:
        for round_ in range(args.rounds):
            for way in ("post", "prepared", "raw"):
                rate, cpu = asyncio.run(measure(srv.base_url, way, args.calls, args.concurrency))
                print(
                    f"round {round_ + 1} {way}: {rate:.0f} calls/s at c={args.concurrency}, "
                    f"{cpu:.2f} ms CPU a call; {load_average()}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
