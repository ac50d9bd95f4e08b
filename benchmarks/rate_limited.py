"""Benchmark (rate-limited): an llm flow against a server capped in requests or tokens per minute.

    python benchmarks/rate_limited.py [--rows 300] [--runs 3] [--case rpm-headers rpm tpm-headers]

The test server (a child process) answers after 20 ms and enforces its cap as OpenAI does (a
continuously refilled budget; over it, 429 with Retry-After). Cases, all at concurrency 32 with
nothing configured on the connection, so flowkit must learn the limit:

- ``rpm-headers``: 600 requests/minute, the server sends OpenAI's ``x-ratelimit-*`` headers;
- ``rpm``: 600 requests/minute, no headers: only 429s and their Retry-After tell;
- ``tpm-headers``: 60,000 tokens/minute (no request cap), with the headers, charged by usage;
- ``tpm-{prompt_plus_max,max_of}[-headers]``: 150,000 tokens/minute charged as hosted endpoints
  charge on arrival (Azure's prompt + max_tokens; OpenAI's larger of max_tokens and characters
  / 4), with and without the headers; the connection names no rule, so flowkit charges by its
  default (prompt_plus_max) and, with headers, learns the server's;
- ``both-{prompt_plus_max,max_of}[-headers]``: those plus 240 requests/minute at once.

Issue 33's figures: ``--rows 150 --case tpm-prompt_plus_max-headers tpm-prompt_plus_max
tpm-max_of-headers tpm-max_of both-prompt_plus_max-headers both-max_of-headers
both-prompt_plus_max both-max_of --no-naive --declare-rule`` (groundedness sets max_tokens:
300); without ``--declare-rule`` the connection keeps the default rule and, with headers,
learns the server's; ``--told RULE`` has it name RULE whatever the server charges by (``usage``
against a server that charges on arrival, for one). ``--declare-limit`` has the connection
declare the server's ``tpm`` (and ``rpm``), as a user who knows an endpoint's quota does where
no headers come; ``--token-slice``
sets how many seconds of ``tpm`` the server lets arrive at once (1, 10, or Azure's 60).

Prints, per case, the rate reached (requests or tokens that succeeded per minute over the whole
run, start included) as a fraction of the limit and the share of requests rejected, median
(range) over the runs with the machine's load; and, measured in the same invocation, the same
two figures for a minimal aiohttp client at the same concurrency that retries each 429 after
its own Retry-After (what flowkit did before it paced by rate). The limit is the ceiling here.
Every run is a first contact: the local server is not known to send rate-limit headers, so the
run opens at its full concurrency (``flowkit.llm.pacing``). A case whose server sends the
headers stands for OpenAI or Azure, whose hosts get one request alone until the first reply
(whose headers pace the rest), so its connection sets ``slow_start: true``; ``--full-opening``
leaves it unset (an unknown host that sends headers), ``--alone-first`` sets it for every case.
Targets: rate >= 0.90 of an rpm limit and >= 0.85 of a tpm
limit, rejected < 5%; issue 31's at 600 rpm (``--case rpm rpm-headers``): >= 0.95 of the limit
and < 10% rejected without headers, 0% with them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

import aiohttp
from common import judge_body, load_average, run_groundedness, spread, write_rows

from flowkit.testing.server import ServerConfig, serve_subprocess

CASES = {
    "rpm-headers": ServerConfig(latency=0.02, rpm=600, rate_headers=True),
    "rpm": ServerConfig(latency=0.02, rpm=600),
    "tpm-headers": ServerConfig(latency=0.02, tpm=60_000, rate_headers=True),
}
for _rule in ("prompt_plus_max", "max_of"):
    for _headers in (True, False):
        _tail = "-headers" if _headers else ""
        CASES[f"tpm-{_rule}{_tail}"] = ServerConfig(
            latency=0.2, tpm=150_000, rate_headers=_headers, token_charge=_rule
        )
        CASES[f"both-{_rule}{_tail}"] = ServerConfig(
            latency=0.2, tpm=150_000, rpm=240, rate_headers=_headers, token_charge=_rule
        )


def measured(stats: dict, config: ServerConfig, elapsed: float) -> tuple[float, float]:
    """(rate reached / limit, share of requests rejected) from the server's own counters; with
    both limits, the nearer one's fraction (the one that binds)."""
    ok = stats["by_status"].get("200", 0)
    rejected = stats["by_status"].get("429", 0) / max(1, stats["requests"])
    fractions = []
    if config.rpm:
        fractions.append(ok / elapsed * 60.0 / config.rpm)
    if config.tpm:  # tokens as the server charged them, by its rule
        fractions.append(stats["charged_tokens"] / elapsed * 60.0 / config.tpm)
    return max(fractions), rejected


def naive_client(base_url: str, rows: int, concurrency: int) -> float:
    """Seconds a minimal client takes for ``rows`` judge-sized requests, each retried after its
    own 429's Retry-After and nothing else slowed down."""

    async def main() -> float:
        prompt = "Is the answer supported by the context? " * 12  # about a judge prompt
        async with aiohttp.ClientSession() as session:
            todo = iter(range(rows))

            async def worker() -> None:
                for i in todo:
                    body = judge_body(i, prompt)
                    while True:
                        async with session.post(f"{base_url}/chat/completions", json=body) as r:
                            await r.read()
                            if r.status == 200:
                                break
                            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - start

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--case", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument(
        "--declare-rule",
        action="store_true",
        help="the connection names the server's token_charge rule (else flowkit's default)",
    )
    parser.add_argument(
        "--wrong-rule",
        action="store_true",
        help="the connection names the rule the server does not charge by",
    )
    parser.add_argument(
        "--told",
        choices=("prompt_plus_max", "max_of", "usage"),
        help="the connection names this token_charge rule, whatever the server's",
    )
    parser.add_argument(
        "--full-opening",
        action="store_true",
        help="cases with headers open at full concurrency too, as an unknown host's run does",
    )
    parser.add_argument("--no-naive", action="store_true", help="skip the minimal client's figures")
    parser.add_argument(
        "--token-slice",
        type=float,
        default=ServerConfig.token_slice,
        help="seconds of the tpm budget the server lets arrive at once (1: the strictest "
        "quantizing; 60: Azure's per-minute count)",
    )
    parser.add_argument(
        "--declare-limit",
        action="store_true",
        help="the connection declares the server's tpm and rpm (a quota its user knows)",
    )
    parser.add_argument(
        "--alone-first",
        action="store_true",
        help="the connection sets slow_start: true: one request alone until the first reply",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = write_rows(root / "rows.jsonl", args.rows)
        for case in args.case:
            config = dataclasses.replace(CASES[case], token_slice=args.token_slice)
            # The connection names the server's rule, as flowkit's default per kind of endpoint
            # does for OpenAI (max_of) and Azure (prompt_plus_max).
            rule = {"token_charge": config.token_charge} if args.declare_rule else {}
            if args.wrong_rule:
                other = "max_of" if config.token_charge == "prompt_plus_max" else "prompt_plus_max"
                rule = {"token_charge": other}
            if args.told:
                rule = {"token_charge": args.told}
            if args.declare_limit:
                rule.update({k: v for k, v in (("tpm", config.tpm), ("rpm", config.rpm)) if v})
            # A server that sends the headers stands for OpenAI or Azure, whose hosts get one
            # request alone first by default; the local server's URL cannot say so itself.
            alone = args.alone_first or (config.rate_headers and not args.full_opening)
            opening = {"slow_start": True} if alone else {}
            ratios, rejects = [], []
            for run in range(args.runs):
                # A fresh server per run: its budget starts full, as a real one does after a
                # quiet minute.
                with serve_subprocess(config) as srv:
                    elapsed, result = run_groundedness(
                        data,
                        root / f"{case}-{run}",
                        srv.base_url,
                        args.concurrency,
                        max_retries=50,
                        **opening,
                        **rule,
                    )
                    assert result.counts["succeeded"] == args.rows, result.counts
                    ratio, rejected = measured(srv.stats(), config, elapsed)
                ratios.append(ratio)
                rejects.append(rejected * 100)
            naive = ""
            if not args.no_naive:
                with serve_subprocess(config) as srv:
                    elapsed = naive_client(srv.base_url, args.rows, args.concurrency)
                    naive_ratio, naive_rejected = measured(srv.stats(), config, elapsed)
                naive = f"; naive client/limit {naive_ratio:.2f}, rejected {naive_rejected:.0%}"
            declared = ", slow_start: true" if alone else ""
            for key, value in rule.items():
                declared += f", {key}: {value}"
            print(
                f"rate-limited {case}{declared} c={args.concurrency} rows={args.rows}: "
                f"flowkit/limit {spread(ratios)}, rejected {spread(rejects)}% over {args.runs} "
                f"runs{naive}; token slice {args.token_slice:g} s; {load_average()}",
                flush=True,
            )


if __name__ == "__main__":
    main()
