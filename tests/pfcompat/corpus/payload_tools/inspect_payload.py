from promptflow.core import tool


@tool
def inspect_payload(payload: dict, threshold: float) -> dict:
    if isinstance(payload, dict):
        keys = sorted(payload)
        score = payload.get("score", 0)
    else:
        keys = [type(payload).__name__]
        score = 0
    return {"keys": keys, "flagged": score > threshold}
