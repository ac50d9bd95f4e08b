"""Several flows in one call: a list must name at least one flow, each flow once."""

from __future__ import annotations

import pytest

from flowkit.errors import UsageError
from flowkit.flow.compose import compose


def test_an_empty_list_of_flows_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        compose([])
    assert str(info.value).startswith("no flow given to run")


@pytest.mark.parametrize(
    "flows", [["f1_score", "f1_score"], ["ada_similarity", "embedding_similarity"]]
)
def test_a_flow_given_twice_is_refused_by_its_name(flows: list[str]) -> None:
    """(an alias names the same flow: ada_similarity is embedding_similarity)"""
    with pytest.raises(UsageError) as info:
        compose(flows)  # type: ignore[arg-type]
    name = "embedding_similarity" if "ada_similarity" in flows else "f1_score"
    assert str(info.value).startswith(
        f"the flow {name!r} is given twice; each flow's outputs and metrics go under its name, "
        "so give each flow once"
    )
