"""A loaded flow, loaded again when code behind it changed on disk since.

A notebook loads a flow once and runs it many times. A module it imports, edited between two
runs, must not run as its old self while the fingerprint (read from disk) names the new text:
the old code's answers would be stored under the new code's key, for every later run to read.
A loaded flow keeps the files whose text entered its fingerprints (``Flow.code_files``); a run
compares them with the disk first and, when one changed, loads the flow again from its files
(flowkit.code.freshness then imports the changed modules afresh).
"""

from __future__ import annotations

import os
from pathlib import Path

from flowkit.code import freshness
from flowkit.flow.compose import compose
from flowkit.flow.graph import Flow
from flowkit.flow.loader import load_flow


def fresh(flow: Flow) -> Flow:
    """``flow``, or the same flow loaded again when a file whose text entered one of its code
    fingerprints changed on disk since it was loaded."""
    if not flow.sources or not freshness.changed(flow.code_files):
        return flow
    names: list[str | os.PathLike[str]] = list(flow.sources)
    again = load_flow(names[0]) if len(names) == 1 else compose(names, flow.name)
    if flow.target is not None:
        from flowkit.flow.target import with_target

        t = flow.target
        again = with_target(again, t.target, t.columns, Path(t.base))
    return again
