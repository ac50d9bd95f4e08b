"""Trace records: one typed record per node per row, written as versioned JSONL.

Each line carries ``v`` (the record format's version) so readers can tell formats apart without
a side file. msgspec structs keep encoding cheap on the per-node hot path.
"""

from __future__ import annotations

import traceback as tb
from typing import Any

import msgspec

TRACE_VERSION = 1

# Node statuses. A skipped node's `when` was false; an upstream_failed node never ran because
# something it reads failed in this row.
OK, FAILED, SKIPPED, UPSTREAM_FAILED = "ok", "failed", "skipped", "upstream_failed"


class ErrorInfo(msgspec.Struct, omit_defaults=True):
    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def from_exception(cls, err: BaseException) -> ErrorInfo:
        text = "".join(tb.format_exception(type(err), err, err.__traceback__))
        return cls(type(err).__name__, str(err) or type(err).__name__, text)


class LlmCall(msgspec.Struct):
    model: str
    """The model that answered, as the server named it."""
    messages: list[dict[str, Any]]
    usage: dict[str, int] = {}
    finish_reason: str | None = None
    attempts: int = 1
    raw: Any = None
    request: dict[str, Any] | None = None
    """What was asked for: the configured model name and the sampling params actually sent."""


class NodeRecord(msgspec.Struct):
    """One node's execution for one row."""

    run_id: str
    line: int
    node: str
    kind: str
    status: str
    start: float
    end: float
    duration: float
    cache_hit: bool = False
    inputs: dict[str, Any] | None = None
    output: Any = None
    error: ErrorInfo | None = None
    llm: LlmCall | None = None
    v: int = TRACE_VERSION


class CompactRecord(msgspec.Struct, omit_defaults=True):
    """A python node's successful record as ``--trace compact`` writes it: no inputs (a row's
    own inputs are in outputs.jsonl, an inner node's are its upstream nodes' outputs), no empty
    fields, the duration to the microsecond. NodeRecord's decoder reads it back unchanged."""

    run_id: str
    line: int
    node: str
    kind: str
    status: str
    start: float
    end: float
    duration: float
    cache_hit: bool = False
    output: Any = None
    v: int = TRACE_VERSION


TRACE_LEVELS = ("full", "compact")
"""What --trace keeps: every field of every record, or python nodes' successes in short."""


_LLM_FIELDS = frozenset(LlmCall.__struct_fields__)


def llm_call(meta: dict[str, Any]) -> LlmCall:
    """An LlmCall from a call's metadata, which may come from a cache entry written by another
    flowkit version: fields this version does not know are dropped, not fatal."""
    return LlmCall(**{k: v for k, v in meta.items() if k in _LLM_FIELDS})


_encoder = msgspec.json.Encoder(enc_hook=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
_decoder = msgspec.json.Decoder(NodeRecord)


def encode(record: NodeRecord) -> bytes:
    return _encoder.encode(record)


def encode_compact(record: NodeRecord) -> bytes:
    """``record`` as ``--trace compact`` keeps it: short when a python node succeeded (the bulk
    of a python-only run), whole otherwise (an error, a model call, a sub-flow's inputs)."""
    if record.kind != "python" or record.status != OK or record.llm is not None:
        return _encoder.encode(record)  # a python tool's model call is kept as an llm node's
    short = CompactRecord(
        record.run_id,
        record.line,
        record.node,
        record.kind,
        record.status,
        record.start,
        record.end,
        round(record.duration, 6),
        record.cache_hit,
        record.output,
    )
    return _encoder.encode(short)


def decode(line: bytes | str) -> NodeRecord:
    return _decoder.decode(line)
