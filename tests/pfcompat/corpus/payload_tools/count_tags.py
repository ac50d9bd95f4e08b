from promptflow.core import tool


@tool
def count_tags(tags: list, payload=None) -> int:
    extra = payload if isinstance(payload, list) else []
    return len(tags) + len(extra)
