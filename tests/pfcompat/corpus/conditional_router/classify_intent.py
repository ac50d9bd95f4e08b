from promptflow.core import tool


@tool
def classify_intent(query: str, use_search: bool = False) -> str:
    return "search" if use_search or query.endswith("?") else "chat"
