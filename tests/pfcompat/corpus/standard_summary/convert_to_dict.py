import json

from promptflow import tool


@tool
def convert_to_dict(reply: str) -> dict:
    try:
        return json.loads(reply)
    except json.JSONDecodeError:
        return {"category": "other", "evidence": reply}
