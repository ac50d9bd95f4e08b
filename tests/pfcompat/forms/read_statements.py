import json

from promptflow.core import tool


@tool
def read_statements(reply: str) -> float:
    found = json.loads(reply)
    shared = len(found["statements shared by the answer and the reference"])
    extra = len(found["statements in the answer but not in the reference"])
    left_out = len(found["statements from the reference omitted in the answer"])
    assert isinstance(found["hedging"], bool) and 1 <= found["score"] <= 5
    assert all(c["supported"] in ("Yes", "No") for c in found["checks"])
    return shared / max(1, shared + extra + left_out)
