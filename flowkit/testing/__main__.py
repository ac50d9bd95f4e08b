"""Command line for the local OpenAI-compatible test server.

``python -m flowkit.testing`` starts it; this is its one entry point (the server module never
imports this one). Point an
OpenAI client at the printed URL (``OPENAI_BASE_URL=...``, any ``OPENAI_API_KEY``) to run flows
offline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import MISSING, fields
from typing import Any

from flowkit.testing.server import ServerConfig, run_forever

# Flags are generated from the dataclass so the CLI cannot drift from ServerConfig.
_SPECIAL = {"hook", "models", "rules"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m flowkit.testing",
        description="Serve a deterministic OpenAI-compatible API on localhost for tests, "
        "benchmarks and offline runs. Prompt directives: [[reply: TEXT]], [[fault: KIND]], "
        "[[fault-once: KIND]] (KIND: 429, 500, timeout, malformed, garbage), [[finish: REASON]], "
        "[[latency: SECONDS]].",
    )
    for f in fields(ServerConfig):
        if f.name in _SPECIAL:
            continue
        default = f.default if f.default is not MISSING else None
        kind = type(default) if default is not None else str
        parser.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            type=kind,
            default=argparse.SUPPRESS,
            help=f"default: {default!r}",
        )
    parser.add_argument(
        "--models",
        default=argparse.SUPPRESS,
        help="comma-separated model names listed by GET /v1/models",
    )
    parser.add_argument(
        "--rule",
        dest="rules",
        nargs=2,
        action="append",
        metavar=("REGEX", "REPLY"),
        default=argparse.SUPPRESS,
        help="reply REPLY when REGEX matches the last user message (repeatable)",
    )
    parser.add_argument(
        "--config-json",
        default=None,
        help="a JSON object of ServerConfig fields; other flags override it",
    )
    return parser


def parse_config(argv: list[str] | None = None) -> ServerConfig:
    args = vars(build_parser().parse_args(argv))
    raw = args.pop("config_json")
    try:
        data: dict[str, Any] = json.loads(raw) if raw else {}
        if not isinstance(data, dict):
            raise ValueError("--config-json must be a JSON object")
        if "models" in args:
            args["models"] = [m.strip() for m in args["models"].split(",") if m.strip()]
        return ServerConfig.from_dict({**data, **args})
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"error: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    config = parse_config(argv)
    try:
        asyncio.run(run_forever(config))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
