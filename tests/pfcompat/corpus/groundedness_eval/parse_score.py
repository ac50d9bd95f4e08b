import re

from promptflow.core import tool


@tool
def parse_score(reply: str) -> float:
    found = re.search(r"\d", reply or "")
    return float(found.group()) if found else float("nan")
