import re

from promptflow.core import tool


@tool
def read_mark(reply: str) -> float:
    why = re.search(r"^Why: (.+)$", reply, re.M)
    mark = re.search(r"^Mark: (\d)/5$", reply, re.M)
    assert why and "[insert" not in reply, reply
    return float(mark.group(1))
