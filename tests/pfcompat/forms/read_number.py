from promptflow.core import tool


@tool
def read_number(reply: str) -> float:
    # The prompts ask for a bare number, so anything else must fail the row.
    return float(int(reply.strip()))
