from promptflow.core import tool


@tool
async def search(query: str, top: int = 2) -> str:
    return " | ".join(f"doc{i}: {query}" for i in range(top))
