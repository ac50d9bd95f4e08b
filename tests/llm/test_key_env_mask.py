"""A key pasted into ``api_key_env:`` by mistake is never printed back whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import REPO, write_jsonl

PASTED = "sk-proj-AbCdEf0123456789xyzXYZ0123456789abcd"


def test_a_key_pasted_as_api_key_env_is_masked_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "flowkit.yaml").write_text(
        "default_model: gpt-4o-mini\nconnections:\n"
        f"  c: {{base_url: 'https://api.openai.com/v1', api_key_env: '{PASTED}'}}\n"
    )
    write_jsonl(tmp_path / "d.jsonl", [{"context": "a", "answer": "b"}])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AZURE_"))}
    done = subprocess.run(
        [sys.executable, "-m", "flowkit.cli", "run", "groundedness", "--data", "d.jsonl"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert PASTED not in done.stdout + done.stderr
    assert PASTED[:12] not in done.stdout + done.stderr
    assert done.stderr.splitlines()[0] == (
        "error: flow 'groundedness' node 'judge' uses connection 'c', which needs an API key, "
        "but its api_key_env 'sk-p… (44 characters)' is not the name of an environment variable "
        "(a key pasted in by mistake? put the key in a variable and give api_key_env that "
        "variable's name) The same for flow 'groundedness' node 'judge_turns'."
    )
