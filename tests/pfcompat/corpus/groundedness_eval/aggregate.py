from typing import List

from promptflow.core import log_metric, tool


@tool
def aggregate(scores: List[float]):
    valid = [s for s in scores if s == s]
    log_metric("groundedness", round(sum(valid) / len(valid), 3) if valid else 0.0)
    log_metric("pass_rate", sum(1 for s in valid if s >= 3) / len(scores))
    return {"count": len(scores)}
