"""A rerun the cache serves whole never imports the model layer: the openai SDK is most of an
llm run's start-up. Real HTTP to the local test server for the first run; the rerun is a process
of its own, as a CI job's rerun is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowkit
from flowkit.testing.server import LocalServer
from tests.support import EXAMPLES

RERUN = """
import json, sys
import flowkit
result = flowkit.run(sys.argv[1], sys.argv[2], cache_dir=sys.argv[3], runs_root=sys.argv[4])
loaded = sorted(m for m in sys.modules if m == "openai" or m.startswith("flowkit.llm.client"))
print(json.dumps({"statuses": [r["status"] for r in result.rows()], "loaded": loaded}))
"""


@pytest.mark.slow  # a process of its own: about 2 s of start-up
def test_a_rerun_served_from_the_cache_does_not_import_the_sdk(
    llm_server: LocalServer, tmp_path: Path
) -> None:
    data = EXAMPLES / "qa.jsonl"
    first = flowkit.run("groundedness", data, cache_dir=tmp_path / "c", runs_root=tmp_path / "r")
    rows = len(list(first.rows()))
    assert llm_server.stats()["chat_completions"] == rows
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    args = ["groundedness", str(data), str(tmp_path / "c"), str(tmp_path / "r")]
    done = subprocess.run(
        [sys.executable, "-c", RERUN, *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {"statuses": ["ok"] * rows, "loaded": []}
    assert llm_server.stats()["chat_completions"] == rows  # nothing was asked again
