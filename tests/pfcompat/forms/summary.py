from promptflow.core import log_metric, tool


@tool
def summary(stars: list, entailed: list, statements: list, mark: list, clarity: list) -> dict:
    found = {}
    for name, values in [
        ("stars", stars),
        ("entailed", entailed),
        ("sorted_statements", statements),
        ("mark", mark),
        ("clarity", clarity),
    ]:
        found[name] = round(sum(values) / len(values), 2)
        log_metric(name, found[name])
    return found
