from promptflow.core import tool


@tool
def measure(text: str) -> int:
    return len(text.split())
