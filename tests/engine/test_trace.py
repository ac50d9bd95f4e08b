"""Trace records: typed, versioned, and tolerant of metadata written by other versions."""

from __future__ import annotations

from flowkit.engine.records import LlmCall, NodeRecord, decode, encode, llm_call


def test_llm_metadata_from_a_newer_cache_entry_drops_unknown_fields() -> None:
    meta = {"model": "m", "messages": [], "usage": {"total_tokens": 3}, "from_the_future": 1}
    assert llm_call(meta) == LlmCall("m", [], {"total_tokens": 3})


def test_a_record_round_trips_with_its_version() -> None:
    record = NodeRecord(
        "run", 0, "n", "llm", "ok", 1.0, 2.0, 1.0, llm=llm_call({"model": "m", "messages": []})
    )
    line = encode(record)
    assert b'"v":1' in line
    assert decode(line) == record
